// cairn-http-child: one request with HTTPTransport, then what the process has mapped.
//
// Usage: cairn-http-child <url> [ca file]
// Prints, one per line:
//   "STATUS <n>" or "FAILURE <kind> <message>"
//   "LIBSSL yes|no"    whether a libssl is mapped (/proc/self/maps)
//   "VMRSS <kB>"       the resident set size after the request (/proc/self/status)
import CairnStore
import CairnUploader
import Foundation

let args = CommandLine.arguments
guard args.count == 2 || args.count == 3 else {
    FileHandle.standardError.write(Data("usage: cairn-http-child <url> [ca file]\n".utf8))
    exit(2)
}
let transport = HTTPTransport(caFile: args.count == 3 ? args[2] : nil)
let request = UploadRequest(url: args[1], headers: [HTTPHeader("Content-Type", "application/json")],
                            body: Array(#"{"event":"probe"}"#.utf8), idempotencyKey: "probe")
switch transport.send(request, attempt: 0, timeout: .seconds(60)) {
case .response(let response): print("STATUS \(response.status)")
case .failure(let failure): print("FAILURE \(failure.kind) \(failure.message)")
}
let maps = (try? String(contentsOfFile: "/proc/self/maps", encoding: .utf8)) ?? ""
print("LIBSSL \(maps.contains("libssl") ? "yes" : "no")")
let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
let rss = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }?
    .split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "?"
print("VMRSS \(rss)")
