import CairnBase
package import CairnProcessor
import CZstd
import Glibc

/// A request body sent uncompressed but kept compressed while it waits, is out and is
/// stored: zstd frames (level 1, each with its content size and checksum) of at most
/// ``frameBytes`` of the body each, whose contents, in order, are the body as sent
/// (docs/FORMATS.md, "Snapshot store", `Cairn-Stored-Body`). Frames one after another
/// are one zstd stream: `zstd -d` gives the body back.
///
/// The transport decompresses one frame at a time as it writes (``Reader``), so the
/// uncompressed body is never whole in memory: OTLP without `Content-Encoding` at 100k
/// events a second keeps megabytes of bodies out at once, a tenth of that packed.
package enum PackedBody {
    /// The most body bytes one frame holds when Cairn packs: 32 KiB.
    package static let frameBytes = 32 << 10
    /// The most one frame may hold when a packed body is read (another writer may cut
    /// it differently): 1 MiB.
    package static let maxFrameBytes = 1 << 20

    /// One frame of a packed body: where it is in the packed bytes, and where its
    /// content goes in the body.
    package struct Frame: Equatable {
        /// Its offset in the packed bytes.
        package var at: Int
        /// Its compressed length.
        package var count: Int
        /// The offset of its content in the body.
        package var bodyAt: Int
        /// Its content's length.
        package var bodyCount: Int
    }

    /// `body` packed with `context`'s compression context (kept by the caller between
    /// bodies), or nil when zstd fails.
    package static func pack(_ body: OTLPEncoder.BodyPieces, context: ZstdContext) -> [UInt8]? {
        guard let cctx = context.cctx else { return nil }
        ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters)
        guard ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 1)) == 0,
              ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1)) == 0 else { return nil }
        let input = UnsafeMutableRawPointer.allocate(byteCount: frameBytes, alignment: 16)
        defer { input.deallocate() }
        var out: [UInt8] = []
        let bound = ZSTD_compressBound(frameBytes)
        var offset = 0
        while offset < body.count {
            let n = min(frameBytes, body.count - offset)
            body.copy(from: offset, count: n, to: input)
            let start = out.count
            out.append(contentsOf: repeatElement(0, count: bound))
            let written = out.withUnsafeMutableBytes { o -> Int? in
                guard let to = o.baseAddress else { return nil }
                let n = ZSTD_compress2(cctx, to + start, bound, input, n)
                return ZSTD_isError(n) == 0 ? n : nil
            }
            guard let written else { return nil }
            out.removeLast(bound - written)
            offset += n
        }
        // Kept while the request waits and is out: at its size, not its growth's.
        guard out.capacity > out.count + out.count / 8 else { return out }
        return [UInt8](unsafeUninitializedCapacity: out.count) { buffer, initialized in
            initialized = buffer.initialize(from: out).1
        }
    }

    /// The frames of a packed body; nil when it is not one (a frame that does not
    /// parse, without a content size, empty or over ``maxFrameBytes``; bytes after the
    /// last).
    /// Checksums are not tested here (``unpack(_:)`` and ``Reader`` test them).
    package static func frames(_ packed: [UInt8]) -> [Frame]? {
        packed.withUnsafeBytes { p -> [Frame]? in
            guard let base = p.baseAddress else { return [] }
            var frames: [Frame] = []
            var at = 0, bodyAt = 0
            while at < p.count {
                let count = ZSTD_findFrameCompressedSize(base + at, p.count - at)
                let size = ZSTD_getFrameContentSize(base + at, p.count - at)
                guard ZSTD_isError(count) == 0, count > 0, size != ZSTD_CONTENTSIZE_UNKNOWN,
                      size != ZSTD_CONTENTSIZE_ERROR, size > 0, size <= UInt64(maxFrameBytes) else { return nil }
                frames.append(Frame(at: at, count: count, bodyAt: bodyAt, bodyCount: Int(size)))
                at += count
                bodyAt += Int(size)
            }
            return frames
        }
    }

    /// The body a packed body holds; nil when it is damaged (``frames(_:)``, or a frame
    /// whose content or checksum does not hold).
    package static func unpack(_ packed: [UInt8]) -> [UInt8]? {
        guard let frames = frames(packed) else { return nil }
        let total = frames.last.map { $0.bodyAt + $0.bodyCount } ?? 0
        var failed = false
        let body = [UInt8](unsafeUninitializedCapacity: total) { buffer, initialized in
            guard let to = buffer.baseAddress else { return }
            packed.withUnsafeBytes { p in
                for f in frames where !failed {
                    failed = !decompress(p, f, into: UnsafeMutableRawPointer(to + f.bodyAt))
                }
            }
            initialized = failed ? 0 : total
        }
        return failed ? nil : body
    }

    /// Whether every frame of a packed body decompresses to its content size with its
    /// checksum holding, read one frame at a time.
    package static func isIntact(_ packed: [UInt8]) -> Bool {
        guard let reader = Reader(packed) else { return false }
        var offset = 0
        while offset < reader.count {
            guard let piece = reader.piece(at: offset) else { return false }
            offset += piece.count
        }
        return true
    }

    /// One decompression context for every thread, taken for one frame at a time (a
    /// frame decompresses in microseconds; a context is tens of kilobytes).
    private static let decompression = Locked<OpaquePointer?>(nil)

    /// Decompresses frame `f` of `packed` into `to` (room for its content); false when
    /// it does not decompress to exactly its content size.
    private static func decompress(_ packed: UnsafeRawBufferPointer, _ f: Frame, into to: UnsafeMutableRawPointer) -> Bool {
        guard let base = packed.baseAddress else { return f.bodyCount == 0 }
        return decompression.withLock { dctx -> Bool in
            if dctx == nil { dctx = ZSTD_createDCtx() }
            guard let dctx else { return false }
            let n = ZSTD_decompressDCtx(dctx, to, f.bodyCount, base + f.at, f.count)
            return ZSTD_isError(n) == 0 && n == f.bodyCount
        }
    }

    /// Hands out a packed body's bytes as they are sent: the frame holding an offset,
    /// decompressed into one buffer of the largest frame's size.
    package final class Reader {
        /// The body's length, uncompressed.
        package let count: Int
        private let packed: [UInt8]
        private let frames: [Frame]
        private let buffer: UnsafeMutableRawPointer
        private let mapped: Int
        private var current = -1

        /// A reader of `packed`; nil when ``PackedBody/frames(_:)`` refuses it, or no
        /// memory is left.
        package init?(_ packed: [UInt8]) {
            guard let frames = PackedBody.frames(packed) else { return nil }
            // Its own mapping, unmapped when the send is over: the senders' threads
            // keep no allocator arena grown by it.
            let size = max(1, frames.map(\.bodyCount).max() ?? 0)
            guard let memory = mmap(nil, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
                  memory != MAP_FAILED else { return nil }
            self.packed = packed
            self.frames = frames
            count = frames.last.map { $0.bodyAt + $0.bodyCount } ?? 0
            buffer = memory
            mapped = size
        }

        deinit { munmap(buffer, mapped) }

        /// The body's bytes from `offset` to the end of the frame that holds it (valid
        /// until the next call); nil when `offset` is not in the body or the frame is
        /// damaged.
        package func piece(at offset: Int) -> UnsafeRawBufferPointer? {
            guard offset >= 0, offset < count else { return nil }
            if current < 0 || !(frames[current].bodyAt..<frames[current].bodyAt + frames[current].bodyCount).contains(offset) {
                // The next frame, most often; else found by halving.
                var k = current + 1
                if !(k < frames.count && frames[k].bodyAt <= offset && offset < frames[k].bodyAt + frames[k].bodyCount) {
                    var low = 0, high = frames.count - 1
                    while low < high {
                        let mid = (low + high + 1) / 2
                        if frames[mid].bodyAt <= offset { low = mid } else { high = mid - 1 }
                    }
                    k = low
                }
                current = -1
                guard packed.withUnsafeBytes({ PackedBody.decompress($0, frames[k], into: buffer) }) else { return nil }
                current = k
            }
            let f = frames[current]
            return UnsafeRawBufferPointer(start: buffer + (offset - f.bodyAt), count: f.bodyAt + f.bodyCount - offset)
        }
    }
}
