/// The bytes an OTLP output writes: a growable buffer whose appends are plain stores
/// (an array's append checks its storage's sharing at each call, which at a few bytes a
/// field was most of the encoder's time). Not a value: copies share the storage, and
/// its owner frees it once, with ``free()``.
struct OutputBytes {
    private(set) var base: UnsafeMutableRawPointer?
    private(set) var count = 0
    private var capacity = 0

    init() {}

    @inline(__always)
    private mutating func reserve(_ n: Int) -> UnsafeMutableRawPointer {
        if count + n > capacity { grow(count + n) }
        // Allocated by `grow` (which, as an array's growth, has memory or stops).
        return base.unsafelyUnwrapped + count
    }

    private mutating func grow(_ needed: Int) {
        let size = max(needed, capacity * 2, 512)
        // As an array grows: a new block, the bytes copied, the old one given back.
        let moved = UnsafeMutableRawPointer.allocate(byteCount: size, alignment: 16)
        if let base {
            moved.copyMemory(from: base, byteCount: count)
            base.deallocate()
        }
        base = moved
        capacity = size
    }

    /// Room for `n` more bytes, where the next ones go: write up to `n`, then
    /// ``advance(_:)`` by what was written.
    @inline(__always)
    mutating func spare(_ n: Int) -> UnsafeMutableRawPointer { reserve(n) }

    /// Counts `n` bytes written into ``spare(_:)``.
    @inline(__always)
    mutating func advance(_ n: Int) { count += n }

    /// Appends one byte.
    @inline(__always)
    mutating func append(_ b: UInt8) {
        reserve(1).storeBytes(of: b, as: UInt8.self)
        count += 1
    }

    /// Appends bytes.
    @inline(__always)
    mutating func append(contentsOf bytes: UnsafeRawBufferPointer) {
        guard let from = bytes.baseAddress, !bytes.isEmpty else { return }
        let n = bytes.count
        let to = reserve(n)
        if n <= 16 {
            // Most fields are a few bytes: copied here rather than through a call.
            for k in 0..<n { to.storeBytes(of: from.load(fromByteOffset: k, as: UInt8.self), toByteOffset: k, as: UInt8.self) }
        } else {
            to.copyMemory(from: from, byteCount: n)
        }
        count += n
    }

    /// Appends the bytes of an array.
    mutating func append(contentsOf bytes: [UInt8]) {
        bytes.withUnsafeBytes { append(contentsOf: $0) }
    }

    /// The byte at `i` (below ``count``).
    subscript(i: Int) -> UInt8 {
        get { base.unsafelyUnwrapped.load(fromByteOffset: i, as: UInt8.self) }
        set { base.unsafelyUnwrapped.storeBytes(of: newValue, toByteOffset: i, as: UInt8.self) }
    }

    /// Moves the bytes from `at` on by `gap` bytes (which it leaves as they were), for a
    /// length written in front of them that takes more than its reserved byte.
    mutating func open(gap: Int, at: Int) {
        let moving = count - at
        _ = reserve(gap)
        let start = base.unsafelyUnwrapped + at
        (start + gap).copyMemory(from: start, byteCount: moving)
        count += gap
    }

    /// Moves the bytes from `at` on back by `gap` bytes (over the ones before them).
    mutating func close(gap: Int, at: Int) {
        let moving = count - at
        let start = base.unsafelyUnwrapped + at
        (start - gap).copyMemory(from: start, byteCount: moving)
        count -= gap
    }

    /// Empties it, keeping its storage.
    mutating func removeAll() { count = 0 }

    /// Drops the bytes from `n` on.
    mutating func truncate(to n: Int) { count = min(count, max(0, n)) }

    /// The bytes written.
    func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: base, count: count))
    }

    /// The bytes written, as an array.
    var array: [UInt8] { withUnsafeBytes { Array($0) } }

    /// Gives the storage back; empty after.
    mutating func free() {
        base?.deallocate()
        base = nil
        count = 0
        capacity = 0
    }
}
