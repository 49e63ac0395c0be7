import CCairnCrash
import CairnBase
import CairnTestSupport
import Foundation
import Testing

/// The crash core's `pthread_create` hook (CSources/CCairnCrash/altstack.c) never breaks
/// thread creation where it is compiled in, and is not in a binary that links only the
/// storage core.
@Suite struct ThreadHookTests {
    /// Builds Tests/Tools/thread_hook_probe.c with the hook and the given defines, runs
    /// it, and returns its output lines as key → values.
    static func probe(_ defines: [String], extra: [String] = []) throws -> (values: [String: [Int]], stderr: String) {
        let dir = try TemporaryDirectory("cairn-hook")
        let root = repoRoot.path
        let binary = dir.appending("probe")
        let includes = ["CSources/CCairnCore/include", "CSources/CCairnCore", "CSources/CCairnCrash/include",
                        "CSources/CCairnCrash"].map { "-I" + root + "/" + $0 }
        let built = try runToEnd(try toolchainDirectory() + "/clang",
                                 ["-std=gnu11", "-Wall", "-Wextra", "-Werror"] + defines + extra + includes
                                 + [root + "/CSources/CCairnCrash/altstack.c", root + "/Tests/Tools/thread_hook_probe.c",
                                    "-o", binary, "-lpthread", "-ldl"])
        try #require(built.status == 0, "the probe builds: \(built.err)")
        let ran = try runToEnd(binary, [], timeout: 60)
        #expect(ran.status == 0 && !ran.signaled, "\(ran.err)")
        var values: [String: [Int]] = [:]
        for line in ran.out.split(separator: "\n") {
            let words = line.split(separator: " ")
            guard let key = words.first else { continue }
            values[String(key)] = words.dropFirst().compactMap { Int($0) }
        }
        return (values, ran.err)
    }

    /// The usual case: libc's `pthread_create` is the next definition; every thread is
    /// created and gets its alternate stack.
    @Test func theHookFindsTheCLibrary() throws {
        let p = try Self.probe([])
        #expect(p.values["STATE"] == [Int(CAIRN_THREAD_HOOK_ON)])
        #expect(p.values["CREATED"] == [8, 0] && p.values["STACKS"] == [8], "\(p.values)")
    }

    /// A build where dlsym(RTLD_NEXT) finds nothing (as for the hook in a shared library
    /// that comes after the C library): threads are still created, with their stacks, and
    /// the state says the fallback served.
    @Test func aFailedNextLookupFallsBackToTheCLibrarysOwnHandle() throws {
        let p = try Self.probe(["-DCAIRN_TEST_NO_RTLD_NEXT"])
        #expect(p.values["STATE"] == [Int(CAIRN_THREAD_HOOK_FALLBACK)])
        #expect(p.values["CREATED"] == [8, 0] && p.values["STACKS"] == [8], "\(p.values)")
        #expect(p.stderr.isEmpty, "nothing to tell: \(p.stderr)")
    }

    /// Where no definition can be found at all (a fully static glibc link, here forced),
    /// creation fails, the state says so, and the operator is told once on stderr; the
    /// remedy, CAIRN_NO_THREAD_HOOK, gives a static binary that creates threads.
    @Test func withNoCLibraryDefinitionTheOperatorIsToldAndTheRemedyWorks() throws {
        let missing = try Self.probe(["-DCAIRN_TEST_NO_RTLD_NEXT", "-DCAIRN_TEST_NO_LIBC_HANDLE"])
        #expect(missing.values["STATE"] == [Int(CAIRN_THREAD_HOOK_MISSING)])
        #expect(missing.values["CREATED"] == [0, Int(EAGAIN)], "\(missing.values)")
        #expect(missing.stderr.components(separatedBy: "pthread_create cannot be found").count == 2,
                "said once: \(missing.stderr)")
        let remedy = try Self.probe(["-DCAIRN_NO_THREAD_HOOK"], extra: ["-static"])
        #expect(remedy.values["STATE"] == [0] && remedy.values["CREATED"] == [8, 0], "\(remedy.values)")
    }

    /// `nm`: the hook is defined where crash capture is linked, and nowhere else (a
    /// binary built on the storage core and the uploader has none). A sanitizer build
    /// has it nowhere (the sanitizer's runtime defines `pthread_create`).
    @Test(arguments: [("cairn-crash-child", true), ("cairn-ring-child", false), ("cairn-upload-child", false)])
    func pthreadCreateIsDefinedOnlyWhereCrashCaptureIsLinked(binary: String, defined: Bool) throws {
        let listed = try runToEnd(try toolchainDirectory() + "/llvm-nm", ["--defined-only", productsDirectory + "/" + binary])
        try #require(listed.status == 0, "\(listed.err)")
        let symbols = listed.out.split(separator: "\n")
        let definesIt = symbols.contains { $0.hasSuffix(" T pthread_create") }
        let sanitized = symbols.contains { $0.contains(" __asan_init") || $0.contains(" __tsan_init") }
        #expect(definesIt == (defined && !sanitized), "\(binary), sanitized: \(sanitized)")
    }
}

@Suite struct VersionTests {
    /// The Swift layers' version is the C cores' (written twice so that CairnBase needs
    /// no C).
    @Test func theSwiftAndCVersionsAgree() {
        #expect(cairnVersion == String(cString: cairn_version()))
        #expect(cairnVersion == CAIRN_VERSION_STRING)
    }
}
