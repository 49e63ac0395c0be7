// cairn-store-child: opens a snapshot store read-write, as a service does, for the
// store's fault tests: whatever the files hold, a signal here fails a test instead of
// killing the test runner.
//
// Usage: cairn-store-child open <store dir>
//          Opens the store and prints one JSON line about the open: {"count", "damage"
//          (null or {"found", "expected", "salvaged", "lost", "fromPages", "metadata",
//          "setAside"})}; stores one more snapshot (idempotency key "child-put"); then
//          prints every snapshot oldest first, one JSON line each ({"id", "priority",
//          "attempts", "createdAt", "nextAttemptAt", "method", "url", "idempotencyKey",
//          "headers", "body" in base64}), then {"metadata": {key: base64}}.
//        cairn-store-child put <store dir> <n>
//          Stores n snapshots, each in its own commit, then prints "PUT <n>".
//        cairn-store-child peak <store dir>
//          Opens the store and prints "PEAK <kB>": how much the process's peak RSS
//          (VmHWM) grew while it opened, and "MAPPED <kB>": data.mdb's resident pages after.
// Exits 0, or 1 with the error on stderr.
import CairnStore
import CairnTestSupport
import CairnUploader
import Foundation

func line(_ object: Any) {
    guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return }
    FileHandle.standardOutput.write(data + Data("\n".utf8))
}

func request(_ n: Int) -> UploadRequest {
    UploadRequest(url: "https://collector.example/v1/batch", headers: [HTTPHeader("Content-Encoding", "zstd")],
                  body: Array("child body \(n)".utf8), idempotencyKey: n == 0 ? "child-put" : "child-put-\(n)")
}

let args = CommandLine.arguments
guard args.count >= 3, ["open", "put", "peak"].contains(args[1]) else {
    FileHandle.standardError.write(Data("usage: cairn-store-child open|put|peak <store dir> [n]\n".utf8))
    exit(2)
}
/// `VmHWM` of /proc/self/status, in kB.
func peakKB() -> Int {
    let text = String(decoding: FileHandle(forReadingAtPath: "/proc/self/status")?.readDataToEndOfFile() ?? Data(),
                      as: UTF8.self)
    return text.split(separator: "\n").first { $0.hasPrefix("VmHWM:") }?
        .split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap { Int($0) } ?? -1
}
let peakBefore = peakKB()
do {
    let store = try SnapshotStore(directory: args[2], options: .init(recordCheck: UploadRequest.recordCheck))
    if args[1] == "peak" {
        print("PEAK \(peakKB() - peakBefore)")
        print("MAPPED \(residentKB(ofMapping: args[2] + "/data.mdb") ?? 0)")
        exit(0)
    }
    if args[1] == "put" {
        let n = args.count > 3 ? Int(args[3]) ?? 1 : 1
        for i in 1...max(n, 1) { try store.put(request(i).record, priority: .sampled) }
        print("PUT \(n)")
        exit(0)
    }
    let stats = store.stats
    var damage: Any = NSNull()
    if let d = stats.damage {
        damage = ["found": d.found, "expected": d.expected ?? -1, "salvaged": d.salvaged, "lost": d.lost ?? -1,
                  "fromPages": d.recoveredFromPages, "metadata": d.metadataSalvaged, "setAside": d.setAsidePath ?? ""]
    }
    line(["count": stats.count, "damage": damage])
    try store.put(request(0).record, priority: .sampled)
    for s in try store.oldest(limit: Int.max) {
        guard let r = UploadRequest(record: s.record) else {
            line(["id": s.id.description, "undecodable": true])
            continue
        }
        line(["id": s.id.description, "priority": Int(s.priority.storeCode), "attempts": Int(s.attempts),
              "createdAt": s.createdAt, "nextAttemptAt": s.nextAttemptAt, "method": r.method,
              "url": r.url, "idempotencyKey": r.idempotencyKey,
              "headers": r.headers.map { [$0.name, $0.value] }, "body": Data(r.body).base64EncodedString()])
    }
    var metadata: [String: String] = [:]
    for key in ["install.time", "install.zone", "run.state"] {
        if let value = try store.metadata(key) { metadata[key] = Data(value).base64EncodedString() }
    }
    line(["metadata": metadata])
} catch {
    FileHandle.standardError.write(Data("cairn-store-child: \(error)\n".utf8))
    exit(1)
}
