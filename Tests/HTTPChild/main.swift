// cairn-http-child: one request with HTTPTransport, then what the process has mapped.
//
// Usage: cairn-http-child <url> [ca file]
// CAIRN_TLS_LIBRARY=openssl|mbedtls picks the TLS library (else the default, automatic).
// Prints, one per line:
//   "STATUS <n>" or "FAILURE <kind> <message>"
//   "LIBSSL yes|no"    whether a libssl is mapped (/proc/self/maps)
//   "LIBMBEDTLS yes|no" whether a libmbedtls is mapped
//   "VMRSS <kB>"       the resident set size after the request (/proc/self/status)
import CairnStore
import CairnUploader
import Foundation

let args = CommandLine.arguments
guard args.count == 2 || args.count == 3 else {
    FileHandle.standardError.write(Data("usage: cairn-http-child <url> [ca file]\n".utf8))
    exit(2)
}
let library: HTTPTransport.TLSLibrary
switch ProcessInfo.processInfo.environment["CAIRN_TLS_LIBRARY"] {
case "openssl": library = .openSSL
case "mbedtls": library = .mbedTLS
default: library = .automatic
}
let transport = HTTPTransport(caFile: args.count == 3 ? args[2] : nil, tlsLibrary: library)
let request = UploadRequest(url: args[1], headers: [HTTPHeader("Content-Type", "application/json")],
                            body: Array(#"{"event":"probe"}"#.utf8), idempotencyKey: "probe")
switch transport.send(request, attempt: 0, timeout: .seconds(60)) {
case .response(let response): print("STATUS \(response.status)")
case .failure(let failure): print("FAILURE \(failure.kind) \(failure.message)")
}
/// A /proc file's whole text: its size reads as 0, so it is read to the end.
func procFile(_ path: String) -> String {
    String(decoding: FileHandle(forReadingAtPath: path)?.readDataToEndOfFile() ?? Data(), as: UTF8.self)
}
let maps = procFile("/proc/self/maps")
print("LIBSSL \(maps.contains("libssl") ? "yes" : "no")")
print("LIBMBEDTLS \(maps.contains("libmbedtls") ? "yes" : "no")")
let status = procFile("/proc/self/status")
let rss = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }?
    .split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "?"
print("VMRSS \(rss)")
