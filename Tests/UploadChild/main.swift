// cairn-upload-child: a process for the uploader's kill tests.
//
// Usage: cairn-upload-child <data dir> <collector url> <run id> <mode>
//   mode "track": append events as fast as the ring takes them, uploading in the
//                 background, until SIGKILLed; each accepted append is reported on
//                 stdout as one line "A <event id>".
//   mode "drain": append nothing; upload what earlier runs left (ring and snapshot
//                 store) until all is delivered, then print "DRAINED" and exit 0.
import CairnStore
import CairnUploader
import Foundation

let args = CommandLine.arguments
guard args.count == 5 else {
    FileHandle.standardError.write(Data("usage: cairn-upload-child <dir> <url> <run> track|drain\n".utf8))
    exit(2)
}
let (dir, url, run, mode) = (args[1], args[2], args[3], args[4])

/// One unbuffered line on stdout: once written, the parent sees it even after SIGKILL.
func say(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
}

do {
    let ring = try Ring(path: dir + "/events.ring", options: .init(capacity: 1 << 20))
    let store = try SnapshotStore(directory: dir + "/store")
    let options = UploaderOptions(url: url, maxBatchEvents: 200, maxBatchAge: .milliseconds(50), attempts: 2,
                                  backoff: Backoff(base: .milliseconds(20), cap: .milliseconds(200)),
                                  maxPause: .milliseconds(300),
                                  breaker: CircuitBreaker(threshold: 1000, probeAfter: .milliseconds(100)),
                                  requestTimeout: .seconds(2), syncInterval: .milliseconds(200))
    let uploader = Uploader(ring: ring, store: store, transport: HTTPTransport(), options: options)
    uploader.start()
    if mode == "drain" {
        let deadline = ContinuousClock().now + .seconds(60)
        while ContinuousClock().now < deadline {
            if uploader.flush(timeout: .seconds(2)) && store.stats.count == 0 {
                say("DRAINED")
                exit(0)
            }
        }
        FileHandle.standardError.write(Data("not drained: ring \(ring.stats().used) B, store \(store.stats.count)\n".utf8))
        exit(1)
    }
    var seq = 0
    while true {
        let id = "\(run)-\(seq)"
        let event = Array(#"{"event_id":"\#(id)","name":"kill_test","seq":\#(seq),"pad":"\#(String(repeating: "x", count: seq % 200))"}"#.utf8)
        do {
            try ring.append(event)
            say("A \(id)")
            seq += 1
            usleep(200) // a busy service, not a flood: keeps the collector's records manageable
        } catch {
            usleep(1000) // full: the uploader is behind or the collector down
        }
    }
} catch {
    FileHandle.standardError.write(Data("cairn-upload-child: \(error)\n".utf8))
    exit(1)
}
