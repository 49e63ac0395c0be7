// cairn-http-child: one request with HTTPTransport, then what the process has mapped.
//
// Usage: cairn-http-child <url> [ca file]
// CAIRN_TLS_LIBRARY=openssl|mbedtls picks the TLS library (else the default, automatic).
// CAIRN_CHILD_PRELOAD=<soname> loads that library first, as a service using it would.
// CAIRN_CHILD_WRITE_CODE=<name>: after the request, maps every page of the code of the
// library whose file name contains <name>, writes one of its pages (the byte it holds,
// as a debugger's breakpoint or a uprobe writes one: the page becomes the process's
// own copy), then calls cairn_http_tls_release_pages.
// Prints, one per line:
//   "STATUS <n>" or "FAILURE <kind> <message>"
//   "LIBSSL yes|no"    whether a libssl is mapped (/proc/self/maps)
//   "LIBMBEDTLS yes|no" whether a libmbedtls is mapped
//   "VMRSS <kB>"       the resident set size after the request (/proc/self/status)
//   "CODE <file> <resident kB> <size kB>" for each TLS library's code (r-xp) mapping
//   with CAIRN_CHILD_WRITE_CODE: "RELEASED <bytes>", and "WRITTEN kept|lost": whether
//   the written page is still the process's copy after the release
// CAIRN_CHILD_AGAIN=<name>: after the first request (whose end released the TLS
// libraries' pages: it set a connection up), one more on the kept-alive connection, then
// "BACK <mappings> <resident kB>" of the code of the library whose file name starts
// with <name>; 2.1 s later a third (its end makes the release that follows a setup's)
// and a fourth, then "AGAIN <mappings> <resident kB>"; a "STATUS" line for each.
import CairnStore
import CairnUploader
import CCairnHTTP
import Foundation

if let soname = ProcessInfo.processInfo.environment["CAIRN_CHILD_PRELOAD"], dlopen(soname, RTLD_NOW) == nil {
    print("PRELOAD failed: \(soname)")
    exit(2)
}

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
/// Sends the request and prints its outcome.
func send() {
    switch transport.send(request, attempt: 0, timeout: .seconds(60)) {
    case .response(let response): print("STATUS \(response.status)")
    case .failure(let failure): print("FAILURE \(failure.kind) \(failure.message)")
    }
}
send()
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

/// The r-xp mappings of TLS libraries in /proc/self/smaps: (file, start, end, resident kB).
func codeMappings() -> [(file: String, start: UInt, end: UInt, resident: Int)] {
    var out: [(file: String, start: UInt, end: UInt, resident: Int)] = []
    var current: (file: String, start: UInt, end: UInt)?
    for line in procFile("/proc/self/smaps").split(separator: "\n") {
        let fields = line.split(separator: " ", omittingEmptySubsequences: true)
        if fields.count >= 5, fields[0].contains("-"),
           let range = Optional(fields[0].split(separator: "-").compactMap { UInt($0, radix: 16) }), range.count == 2 {
            current = nil
            let file = fields.count >= 6 ? String(fields[5].split(separator: "/").last ?? "") : ""
            if fields[1] == "r-xp", ["libssl", "libcrypto", "libmbed"].contains(where: { file.hasPrefix($0) }) {
                current = (file, range[0], range[1])
            }
        } else if let c = current, fields.first == "Rss:", fields.count >= 2, let kb = Int(fields[1]) {
            out.append((c.file, c.start, c.end, kb))
            current = nil
        }
    }
    return out
}

if let name = ProcessInfo.processInfo.environment["CAIRN_CHILD_AGAIN"] {
    /// The code mappings of the TLS library whose file name starts with `name`: how
    /// many, and their resident kB.
    func code() -> (mappings: Int, resident: Int) {
        let mine = codeMappings().filter { $0.file.hasPrefix(name) }
        return (mine.count, mine.reduce(0) { $0 + $1.resident })
    }
    send()
    let back = code()
    print("BACK \(back.mappings) \(back.resident)")
    usleep(2_100_000)
    send()
    send()
    let again = code()
    print("AGAIN \(again.mappings) \(again.resident)")
}

if let name = ProcessInfo.processInfo.environment["CAIRN_CHILD_WRITE_CODE"],
   let code = codeMappings().first(where: { $0.file.contains(name) }) {
    let page = UInt(sysconf(Int32(_SC_PAGESIZE)))
    var sum: UInt8 = 0
    var at = code.start
    while at < code.end {
        sum &+= UnsafePointer<UInt8>(bitPattern: at)!.pointee
        at += page
    }
    let written = code.start + ((code.end - code.start) / page / 2) * page
    let pointer = UnsafeMutableRawPointer(bitPattern: written)!
    guard mprotect(pointer, Int(page), PROT_READ | PROT_WRITE | PROT_EXEC) == 0 else {
        print("WRITE failed: mprotect errno \(errno)")
        exit(2)
    }
    let byte = pointer.load(as: UInt8.self)
    pointer.storeBytes(of: byte, as: UInt8.self)
    _ = mprotect(pointer, Int(page), PROT_READ | PROT_EXEC)
    print("RELEASED \(cairn_http_tls_release_pages()) \(sum)")
    // /proc/self/pagemap: bit 63 present, bit 61 a file page.
    var entry: UInt64 = 0
    let fd = open("/proc/self/pagemap", O_RDONLY)
    let got = pread(fd, &entry, 8, off_t(written / page * 8))
    close(fd)
    print("WRITTEN \(got == 8 && entry >> 63 & 1 == 1 && entry >> 61 & 1 == 0 ? "kept" : "lost")")
}
for code in codeMappings() {
    print("CODE \(code.file) \(code.resident) \((code.end - code.start) / 1024)")
}
