// Batch marks: each framed batch's mark kept in the snapshot store before it is sent,
// batches the last process framed resumed from their marks, records released in ring order.
import CairnBase
import CairnStore
import CCairnCore
import FoundationEssentials
import Glibc

extension Uploader {
    /// Keeps in the snapshot store, for the flights not yet marked and in ring order,
    /// what a process killed from now on needs to rebuild them exactly: the contexts
    /// their records need, then their marks. A batch is sent, and records released,
    /// only once it and every batch before it is marked (``advanceFlights()``,
    /// ``releaseDone()``), so the next start finds the chain of marks from the read
    /// cursor whole and no event goes out under two keys. A failed write (the store
    /// full or failing) is counted and tried again at the next pass.
    func keepMarks() {
        guard let last = flights.last, flights.contains(where: { !$0.marked }) else { return }
        guard let store else {
            for f in flights { f.marked = true }
            return
        }
        var failure: String?
        if !contexts.persist(to: store, ring: ring, upTo: last.mark.next) {
            failure = "the contexts of its records"
        } else {
            for f in flights where !f.marked {
                do {
                    try store.setMetadata(RingBatchMark.metadataKey(slot: f.slot), f.mark.encoded())
                    f.marked = true
                } catch {
                    failure = "its mark (\(error))"
                    break
                }
            }
        }
        guard let failure else {
            marksFailingSince = nil
            return
        }
        marksFailingSince = marksFailingSince ?? clock.now
        state.withLock { $0.stats.markFailures += 1 }
        if options.debugLogging {
            writeStandardError("[cairn] a batch waits: the snapshot store did not keep \(failure); tried again\n")
        }
    }

    /// Whether flight `f` may be sent or released: it is marked, or the store has
    /// refused marks for longer than ``UploaderOptions/markPatience`` (then every batch
    /// goes out as it comes, until a mark is kept again).
    func sendable(_ f: Flight) -> Bool {
        f.marked || marksFailingSince.map { clock.now - $0 >= options.markPatience } ?? false
    }

    /// At start: batches the last process had formed but not yet made safe are formed
    /// again from the same records with the same batch ids and `Idempotency-Key`s, so a
    /// collector that received them drops the copies; batches it had stored but not
    /// yet released from the ring are released (the store has them). The marks are
    /// followed from the read cursor, each starting where the one before ended.
    func resumeMarkedBatches() {
        guard let store else { return }
        var marks: [(slot: Int, mark: RingBatchMark)] = []
        for slot in 0..<RingBatchMark.slots {
            if let bytes = try? store.metadata(RingBatchMark.metadataKey(slot: slot)), let mark = RingBatchMark(bytes),
               mark.ringID == ring.id { marks.append((slot, mark)) }
        }
        var cursor = ring.readPosition
        while let (slot, mark) = marks.first(where: { $0.mark.first == cursor }) {
            // Records are at least 16 bytes: a mark claiming more is damaged.
            guard UInt64(mark.events) <= (mark.next - mark.first) / 16,
                  let run = try? ring.peek(from: cursor, maxRecords: Int(mark.events), maxBytes: Int(ring.capacity)),
                  run.records.count == Int(mark.events), run.next <= mark.next else { break }
            if run.next < mark.next {
                // The batch was read with a larger limit, which also took the padding after
                // its last record: only padding may lie between.
                guard let tail = try? ring.peek(from: run.next, maxRecords: 1, maxBytes: Int(ring.capacity)),
                      (tail.records.first?.position ?? tail.next) == mark.next else { break }
            }
            if mark.stored {
                // The store has this batch (or it had nothing to send): its records are
                // released in turn, once the contexts among them are kept. The drops its
                // request carries are reported by it (the process may have been killed
                // between storing it and marking them).
                markReported(mark.drops?.reported ?? [])
                contexts.observe(run)
                add(Flight(mark: mark, slot: slot, events: 0, reported: [], legs: []))
            } else {
                startBatch(run, mark: mark, slot: slot, resumed: true)
            }
            cursor = mark.next
            marks.removeAll { $0.slot == slot }
        }
        releaseDone()
    }

    /// Releases the ring records of the flights at the front that are done.
    func releaseDone() {
        var upTo: UInt64?
        keepMarks()
        while let f = flights.first, f.done, sendable(f) {
            upTo = f.mark.next
            flights.removeFirst()
        }
        guard let upTo else { return }
        do {
            try ring.commit(upTo: upTo)
        } catch {
            if options.debugLogging {
                writeStandardError("[cairn] batch records not released: \(error)\n")
            }
        }
        progressed = true
    }
}
