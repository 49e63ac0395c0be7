@testable import Cairn
import CairnProcessor
import Foundation
import Testing

/// The readers behind the `context` object, against the files of this machine (read
/// here independently, with Foundation) and against cgroup lines of the usual runtimes.
@Suite struct ContextTests {
    @Test func collectAgreesWithTheMachine() throws {
        let p = CommonProperties.collect()
        var u = utsname()
        #expect(uname(&u) == 0)
        #expect(p.kernel == withUnsafeBytes(of: u.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) })
        #expect(p.pid == getpid())
        let comm = try String(contentsOfFile: "/proc/self/comm", encoding: .utf8)
        #expect(p.processName == comm.trimmingCharacters(in: .whitespacesAndNewlines))
        if let release = try? String(contentsOfFile: "/etc/os-release", encoding: .utf8) {
            var fields: [String: String] = [:]
            for line in release.split(separator: "\n") {
                let kv = line.split(separator: "=", maxSplits: 1)
                if kv.count == 2 { fields[String(kv[0])] = kv[1].trimmingCharacters(in: CharacterSet(charactersIn: "\"'")) }
            }
            #expect(p.osName == fields["NAME"] && p.osVersion == fields["VERSION_ID"])
            #expect(p.osName != nil)
        }
    }

    static let id = String(repeating: "0123456789abcdef", count: 4)

    @Test(arguments: [
        ("0::/system.slice/docker-\(id).scope\n", id),
        ("12:memory:/docker/\(id)\n11:cpu:/docker/\(id)\n", id),
        ("0::/kubepods/besteffort/pod1234/\(id)", id),
        ("0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-\(id).scope\n", id),
        ("1:name=systemd:/crio-\(id.uppercased()).scope\n", id.uppercased()),
        ("0::/user.slice/user-1000.slice/session-2.scope\n", nil),
        ("0::/docker/\(id)x\n", nil),                                   // 65 characters
        ("0::/docker/\(id.dropLast())\n", nil),                         // 63 digits
        ("0::/docker/g\(id.dropFirst())\n", nil),                       // not all hex
        ("", nil),
    ] as [(String, String?)])
    func containerIDs(_ cgroup: String, _ expected: String?) {
        #expect(CommonProperties.containerID(cgroup: cgroup) == expected)
    }

    @Test func trimmingDropsWhiteSpaceAndTheGivenBytes() {
        #expect(CommonProperties.trimmed(Array(" \t Debian \n".utf8)[...]) == "Debian")
        #expect(CommonProperties.trimmed(Array("\"12\"\n".utf8)[...], also: [0x22]) == "12")
        #expect(CommonProperties.trimmed(Array(" \n".utf8)[...]).isEmpty)
        #expect(CommonProperties.trimmed(Array("Zürich".utf8)[...]) == "Zürich")
    }
}
