import Glibc

/// A reader of LMDB 0.9 data files (`data.mdb`) that never maps them.
///
/// LMDB maps its data file and trusts it: a file shorter than its meta page says, or a
/// page whose offsets point outside it, makes LMDB read beyond the mapping (SIGBUS,
/// SIGSEGV) or wander. This reader takes the file with `pread` only, in large chunks,
/// and checks what LMDB would rely on before LMDB is allowed to open it: both meta
/// pages, the file's length, and every page reachable from the free-page, main,
/// `snapshots` and `meta` trees (docs/FORMATS.md, "Snapshot store").
///
/// The layout is LMDB 0.9.24's (`mdb.c`: `MDB_page`, `MDB_node`, `MDB_db`, `MDB_meta`)
/// for 64-bit little-endian machines only, the only ones Cairn runs on.
///
/// The first pass keeps a few words per page (its kind, and per node its offsets and
/// sizes), not the pages, so the check holds a 1 MiB buffer rather than the file.
/// Values are read afterwards, one `pread` each, only when asked for (inspection and
/// salvage).
final class LMDBFile {
    /// How a salvage checks a snapshot's record (see ``SnapshotStore/RecordCheck``).
    var recordCheck: SnapshotStore.RecordCheck?
    /// The file's path.
    let path: String
    private let fd: Int32

    /// Opens `path` for reading.
    ///
    /// - Throws: ``StoreError`` carrying the path and `errno` (`ENOENT`, `EACCES`…);
    ///   `EISDIR` or `EINVAL` when it is not a regular file.
    init(path: String) throws(StoreError) {
        let fd = Glibc.open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw StoreError(errno, function: "open", path: path) }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            let code = errno
            Glibc.close(fd)
            throw StoreError(code, function: "fstat", path: path)
        }
        let type = st.st_mode & S_IFMT
        guard type == S_IFREG else {
            Glibc.close(fd)
            throw StoreError(type == S_IFDIR ? EISDIR : EINVAL, function: "open", path: path)
        }
        self.fd = fd
        self.path = path
    }

    /// The file's length now.
    func length() throws(StoreError) -> Int {
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw StoreError(errno, function: "fstat", path: path) }
        return Int(st.st_size)
    }

    deinit { Glibc.close(fd) }

    /// Fills `buffer` from `offset`; returns how many bytes were read (fewer at the end
    /// of the file).
    func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int) throws(StoreError) -> Int {
        guard let base = buffer.baseAddress else { return 0 }
        var done = 0
        while done < buffer.count {
            let n = pread(fd, base + done, buffer.count - done, off_t(offset + done))
            if n < 0 {
                if errno == EINTR { continue }
                throw StoreError(errno, function: "pread", path: path)
            }
            if n == 0 { break }
            done += n
        }
        return done
    }

    /// Fills `buffer` from `offset`; returns how many bytes were read.
    func read(into buffer: inout [UInt8], at offset: Int) throws(StoreError) -> Int {
        // Array's withUnsafe* methods rethrow untyped errors, hence the Result.
        let result = buffer.withUnsafeMutableBytes { b in
            Result { () throws(StoreError) -> Int in try read(into: b, at: offset) }
        }
        return try result.get()
    }

    /// Up to `count` bytes from `offset` (fewer at the end of the file).
    func bytes(at offset: Int, count: Int) throws(StoreError) -> [UInt8] {
        guard count > 0, offset >= 0 else { return [] }
        var out = [UInt8](repeating: 0, count: count)
        let n = try read(into: &out, at: offset)
        if n < count { out.removeLast(count - n) }
        return out
    }
}

// MARK: Layout

/// LMDB 0.9's on-disk constants (mdb.c), 64-bit little-endian.
enum LMDBLayout {
    /// `PAGEHDRSZ`: page number (8), pad (2), flags (2), lower and upper (2 + 2), or
    /// the overflow page count (4).
    static let pageHeader = 16
    /// `NODESIZE`: data size or child page (lo, hi: 2 + 2), flags (2), key size (2).
    static let nodeHeader = 8
    /// `sizeof(MDB_db)`.
    static let recordSize = 48
    /// `sizeof(MDB_meta)`, which starts right after the page header.
    static let metaSize = 152
    /// `MDB_MAGIC`.
    static let magic: UInt32 = 0xBEEF_C0DE
    /// `MDB_DATA_VERSION` of release builds.
    static let version: UInt32 = 1
    /// `P_INVALID`: no root page (an empty tree).
    static let noPage = UInt64.max
    /// `CURSOR_STACK`: LMDB cannot descend deeper.
    static let maxDepth = 32
    /// `MDB_MAXKEYSIZE`.
    static let maxKeySize = 511
    /// Meta pages, at the start of the file.
    static let metaPages = 2
    /// The smallest page size read. LMDB writes its files with the system's page size,
    /// 4, 16 or 64 KiB on the machines Cairn runs on; smaller pages would only make a
    /// damaged file cost more to read.
    static let minPageSize = 4096

    static let branch: UInt16 = 0x01
    static let leaf: UInt16 = 0x02
    static let overflow: UInt16 = 0x04
    static let meta: UInt16 = 0x08
    /// Cleared before a page is written; ignored if found.
    static let dirty: UInt16 = 0x10

    static let bigData: UInt16 = 0x01
    static let subData: UInt16 = 0x02
    static let dupData: UInt16 = 0x04

    static let integerKey: UInt16 = 0x08
    /// `MDB_REVERSEKEY` through `MDB_REVERSEDUP`: the flags that change how a tree's
    /// pages read. Cairn's databases have none of them; the free-page tree has
    /// `MDB_INTEGERKEY` only.
    static let shapeFlags: UInt16 = 0x7E

    /// Pages an overflow value of `size` bytes takes (`OVPAGES`).
    static func overflowPages(_ size: Int, pageSize: Int) -> Int { (pageHeader - 1 + size) / pageSize + 1 }
}

extension UnsafeRawBufferPointer {
    // Callers check bounds first: these loads do not.
    fileprivate func u16(_ at: Int) -> UInt16 { UInt16(littleEndian: loadUnaligned(fromByteOffset: at, as: UInt16.self)) }
    fileprivate func u32(_ at: Int) -> UInt32 { UInt32(littleEndian: loadUnaligned(fromByteOffset: at, as: UInt32.self)) }
    fileprivate func u64(_ at: Int) -> UInt64 { UInt64(littleEndian: loadUnaligned(fromByteOffset: at, as: UInt64.self)) }
}

extension LMDBFile {
    /// An `MDB_db` record: a tree's root, depth and counts.
    struct Record: Equatable {
        var pad: UInt32
        var flags: UInt16
        var depth: UInt16
        var branchPages: UInt64
        var leafPages: UInt64
        var overflowPages: UInt64
        var entries: UInt64
        var root: UInt64

        /// Reads the record at `at`; the caller checks that 48 bytes are there.
        fileprivate init(_ b: UnsafeRawBufferPointer, at o: Int) {
            pad = b.u32(o)
            flags = b.u16(o + 4)
            depth = b.u16(o + 6)
            branchPages = b.u64(o + 8)
            leafPages = b.u64(o + 16)
            overflowPages = b.u64(o + 24)
            entries = b.u64(o + 32)
            root = b.u64(o + 40)
        }

        /// Why the record cannot describe a tree of a file whose last page is
        /// `lastPage`, or nil.
        func problem(lastPage: UInt64) -> String? {
            if root == LMDBLayout.noPage { return entries == 0 ? nil : "no root page but \(entries) entries" }
            if root < UInt64(LMDBLayout.metaPages) || root > lastPage { return "root page \(root) outside pages 2...\(lastPage)" }
            if depth == 0 || Int(depth) > LMDBLayout.maxDepth { return "depth \(depth) outside 1...\(LMDBLayout.maxDepth)" }
            return nil
        }
    }

    /// An `MDB_meta`: where a committed transaction's trees are.
    struct Meta: Equatable {
        /// 0 or 1: which meta page.
        var slot: Int
        var pageSize: Int
        var free: Record
        var main: Record
        var lastPage: UInt64
        var txnid: UInt64

        /// Reads the meta page `slot` from `page` (its bytes from the page's start), or
        /// says why it is not a valid one: among other things, one whose last page
        /// would make the store larger than `maxSize` bytes.
        static func parse(_ page: UnsafeRawBufferPointer, slot: Int, maxSize: Int) -> Result<Meta, Fault> {
            let h = LMDBLayout.pageHeader
            guard page.count >= h + LMDBLayout.metaSize else { return .failure(Fault("meta page \(slot): missing (the file ends)")) }
            let number = page.u64(0)
            guard number == UInt64(slot) else { return .failure(Fault("meta page \(slot): page number \(number)")) }
            guard page.u16(10) & LMDBLayout.meta != 0 else { return .failure(Fault("meta page \(slot): flags 0x\(hex(page.u16(10)))")) }
            let magic = page.u32(h)
            guard magic == LMDBLayout.magic else { return .failure(Fault("meta page \(slot): magic 0x\(hex(magic))")) }
            let version = page.u32(h + 4)
            guard version == LMDBLayout.version else { return .failure(Fault("meta page \(slot): version \(version)")) }
            let free = Record(page, at: h + 24)
            let main = Record(page, at: h + 72)
            let size = Int(free.pad)
            guard size >= LMDBLayout.minPageSize, size <= 65536, size & (size - 1) == 0 else {
                return .failure(Fault("meta page \(slot): page size \(size)"))
            }
            let meta = Meta(slot: slot, pageSize: size, free: free, main: main, lastPage: page.u64(h + 120),
                            txnid: page.u64(h + 128))
            guard meta.lastPage >= UInt64(LMDBLayout.metaPages - 1) else {
                return .failure(Fault("meta page \(slot): last page \(meta.lastPage)"))
            }
            guard meta.lastPage < UInt64(maxSize / size) else {
                return .failure(Fault("meta page \(slot): last page \(meta.lastPage) of \(size) bytes is beyond "
                                      + "the largest store (\(maxSize) bytes)"))
            }
            guard free.flags & LMDBLayout.shapeFlags == LMDBLayout.integerKey else {
                return .failure(Fault("meta page \(slot): free-page tree flags 0x\(hex(free.flags))"))
            }
            guard main.flags & LMDBLayout.shapeFlags == 0 else {
                return .failure(Fault("meta page \(slot): main tree flags 0x\(hex(main.flags))"))
            }
            for (name, r) in [("free-page", free), ("main", main)] {
                if let p = r.problem(lastPage: meta.lastPage) { return .failure(Fault("meta page \(slot): \(name) tree: \(p)")) }
            }
            return .success(meta)
        }
    }

    /// Something wrong with the file, in words.
    struct Fault: Error, Equatable {
        var text: String
        init(_ text: String) { self.text = text }
    }

    /// What a page's own bytes say it is.
    enum PageKind: Equatable {
        /// Beyond the end of the file.
        case missing
        /// Not a page LMDB could have written here (why: ``Defect/text`` in words).
        case defective(Defect)
        case meta
        /// A branch page; its children are `nodes[first..<first+count]`.
        case branch(first: Int, count: Int)
        /// A leaf page; its entries are `nodes[first..<first+count]`.
        case leaf(first: Int, count: Int)
        /// The first page of an overflow value spanning `pages` pages.
        case overflow(pages: Int)
    }

    /// Why a page is not one LMDB could have written: kept for every such page (every
    /// page but the first of each overflow value carries no header of its own, so a
    /// store of large values has thousands), hence numbers, not words; ``text`` makes
    /// the words when a fault is reported. Per-page strings were 8,000 small heap
    /// allocations for a full store, which the opening thread's heap kept (0.9 MiB).
    enum Defect: Equatable {
        case pageNumber(UInt64)
        case metaFlags
        case emptyOverflow
        case flags(UInt16)
        case bounds(lower: Int32, upper: Int32)
        case crowded(count: Int32, room: Int32, upper: Int32)
        case nodeOffset(node: Int32, offset: Int32)
        case keySize(node: Int32, size: Int32)
        case value(node: Int32, size: UInt32, flags: UInt16)
        case overlap(Int32, Int32)

        /// The reason in words, as faults report it.
        var text: String {
            switch self {
            case .pageNumber(let n): return "page number \(n)"
            case .metaFlags: return "meta page flags"
            case .emptyOverflow: return "overflow of 0 pages"
            case .flags(let f): return "flags 0x\(hex(f))"
            case .bounds(let lower, let upper): return "lower \(lower), upper \(upper)"
            case .crowded(let count, let room, let upper): return "\(count) nodes in the \(room) bytes above upper \(upper)"
            case .nodeOffset(let k, let at): return "node \(k) at offset \(at)"
            case .keySize(let k, let size): return "node \(k): key of \(size) bytes"
            case .value(let k, let size, let flags): return "node \(k): value of \(size) bytes, flags 0x\(hex(flags))"
            case .overlap(let a, let b): return "nodes at offsets \(a) and \(b) overlap"
            }
        }
    }

    /// A node of a branch or leaf page: where its key and value are within the page.
    ///
    /// Kept for every node of every branch and leaf page, so it is packed into 16
    /// bytes: the node's offset (below 64 KiB), its key size (at most 511) with its
    /// flags (3 bits), its value's size (32 bits in LMDB) and a page number.
    struct Node {
        /// A branch node's child, or an overflow value's first page; else 0.
        var page: UInt64
        private var size: UInt32
        private var offset: UInt16
        private var keyAndFlags: UInt16

        init(offset: Int, flags: UInt16, keySize: Int, dataSize: Int, page: UInt64) {
            self.page = page
            size = UInt32(truncatingIfNeeded: dataSize)
            self.offset = UInt16(truncatingIfNeeded: offset)
            keyAndFlags = UInt16(truncatingIfNeeded: keySize) | flags << 12
        }

        var flags: UInt16 { keyAndFlags >> 12 }
        var keySize: UInt16 { keyAndFlags & 0x0FFF }
        /// Offset of the key within the page.
        var keyOffset: Int32 { Int32(offset) + Int32(LMDBLayout.nodeHeader) }
        /// Offset of the value within the page (for an overflow value, of its page
        /// number).
        var dataOffset: Int32 { keyOffset + Int32(keySize) }
        /// Length of the value (on its overflow pages for an overflow value).
        var dataSize: Int { Int(size) }
    }
}

private func hex<T: BinaryInteger>(_ v: T) -> String { String(v, radix: 16) }

// MARK: Pages

extension LMDBFile {
    /// One pass over the file: the kind of every whole page, and the nodes of every
    /// page that reads as a branch or a leaf.
    struct Pages {
        let pageSize: Int
        var kinds: [PageKind] = []
        var nodes: [Node] = []
        /// The nodes and extents of the page being read.
        private var scratch: [Node] = []
        private var extents: [(start: Int, end: Int)] = []

        init(pageSize: Int) { self.pageSize = pageSize }

        var count: Int { kinds.count }

        /// The kind of page `n` (``PageKind/missing`` beyond the file).
        func kind(_ n: UInt64) -> PageKind { n < UInt64(kinds.count) ? kinds[Int(n)] : .missing }

        /// Reads what page `index` (its bytes in `page`) is.
        mutating func add(_ page: UnsafeRawBufferPointer, index: Int) {
            kinds.append(summary(page, index: index))
        }

        /// Adds `count` pages of zeros after the meta pages (a hole in the file).
        mutating func addZeroPages(_ count: Int) {
            kinds.append(contentsOf: repeatElement(.defective(.pageNumber(0)), count: count))
        }

        private mutating func summary(_ p: UnsafeRawBufferPointer, index: Int) -> PageKind {
            let number = p.u64(0)
            guard number == UInt64(index) else { return .defective(.pageNumber(number)) }
            let flags = p.u16(10) & ~LMDBLayout.dirty
            switch flags {
            case LMDBLayout.meta:
                return index < LMDBLayout.metaPages ? .meta : .defective(.metaFlags)
            case LMDBLayout.overflow:
                let pages = Int(p.u32(12))
                return pages >= 1 ? .overflow(pages: pages) : .defective(.emptyOverflow)
            case LMDBLayout.branch, LMDBLayout.leaf:
                return nodes(p, branch: flags == LMDBLayout.branch)
            default:
                return .defective(.flags(p.u16(10)))
            }
        }

        /// Reads the nodes of a branch or leaf page. LMDB packs a page's nodes between
        /// `upper` and the page's end, each at an even offset, none over another; a
        /// page where they overlap each other, the header or the pointers, or run past
        /// the page, is one LMDB never writes. A page's nodes are kept only once the
        /// whole page proves sound, so no page adds more nodes than fit in it: at
        /// least 8 bytes each.
        private mutating func nodes(_ p: UnsafeRawBufferPointer, branch: Bool) -> PageKind {
            let h = LMDBLayout.pageHeader, nh = LMDBLayout.nodeHeader
            let lower = Int(p.u16(12)), upper = Int(p.u16(14))
            guard lower >= h + 2, (lower - h) % 2 == 0, lower <= upper, upper <= pageSize else {
                return .defective(.bounds(lower: Int32(lower), upper: Int32(upper)))
            }
            let count = (lower - h) / 2
            guard count <= (pageSize - upper) / nh else {
                return .defective(.crowded(count: Int32(count), room: Int32(pageSize - upper), upper: Int32(upper)))
            }
            scratch.removeAll(keepingCapacity: true)
            extents.removeAll(keepingCapacity: true)
            for k in 0..<count {
                let at = Int(p.u16(h + 2 * k))
                guard at >= upper, at % 2 == 0, at + nh <= pageSize else {
                    return .defective(.nodeOffset(node: Int32(k), offset: Int32(at)))
                }
                let lo = UInt64(p.u16(at)), hi = UInt64(p.u16(at + 2)), flags = p.u16(at + 4)
                let keySize = Int(p.u16(at + 6))
                let key = at + nh
                guard keySize <= LMDBLayout.maxKeySize, key + keySize <= pageSize else {
                    return .defective(.keySize(node: Int32(k), size: Int32(keySize)))
                }
                if branch {
                    let child = lo | hi << 16 | UInt64(flags) << 32
                    scratch.append(Node(offset: at, flags: 0, keySize: keySize, dataSize: 0, page: child))
                    extents.append((at, key + keySize))
                    continue
                }
                let size = Int(lo | hi << 16)
                let data = key + keySize
                let big = flags & LMDBLayout.bigData != 0
                let end = data + (big ? 8 : size)
                guard flags & ~(LMDBLayout.bigData | LMDBLayout.subData | LMDBLayout.dupData) == 0,
                      end <= pageSize else {
                    return .defective(.value(node: Int32(k), size: UInt32(truncatingIfNeeded: size), flags: flags))
                }
                scratch.append(Node(offset: at, flags: flags, keySize: keySize, dataSize: size,
                                    page: big ? p.u64(data) : 0))
                extents.append((at, end))
            }
            extents.sort { $0.start < $1.start }
            for i in extents.indices.dropFirst() where extents[i].start < extents[i - 1].end {
                return .defective(.overlap(Int32(extents[i - 1].start), Int32(extents[i].start)))
            }
            let first = nodes.count
            nodes.append(contentsOf: scratch)
            return branch ? .branch(first: first, count: count) : .leaf(first: first, count: count)
        }
    }
}

// MARK: Analysis

extension LMDBFile {
    /// A tree as walked from its record: the entries on its sound pages, in key order.
    struct Tree {
        var record: Record
        /// Indexes into ``Pages/nodes``, with their leaf page.
        var entries: [(page: Int, node: Int)] = []
        /// Its sound branch and leaf pages, and the first pages of its overflow values.
        var branches: [Int] = [], leaves: [Int] = [], overflows: [Int] = []
        /// No page of the tree was missing or damaged, and its counts match the record.
        var complete = true
    }

    /// What the file holds and what is wrong with it.
    struct Analysis {
        var pages: Pages
        /// The meta page in use: the newest valid one.
        var meta: Meta?
        /// Both meta pages are valid, so ``meta`` is surely the newest commit.
        var bothMetas = false
        /// Problems found, in words (the first few).
        var faults: [String] = []
        /// How many problems were found in all.
        var faultCount = 0
        var trees: [String: Tree] = [:]
        /// Pages reached from the trees (overflow pages included).
        var used: [Bool] = []
        /// Pages the free-page tree lists as free.
        var free: [Bool] = []
        /// Both meta pages' bytes as read, to notice a commit made while reading.
        var stamp: [UInt8] = []

        var pageSize: Int { pages.pageSize }
        var intact: Bool { faultCount == 0 }

        /// The first problem, and how many more there are.
        var summary: String {
            guard let first = faults.first else { return "" }
            return faultCount > 1 ? "\(first) (and \(faultCount - 1) more)" : first
        }

        mutating func fault(_ text: String) {
            faultCount += 1
            if faults.count < 20 { faults.append(text) }
        }
    }

    /// Names of the trees in ``Analysis/trees``.
    static let freeTree = "free-page", mainTree = "main", snapshotsTree = "snapshots", metaTree = "meta"

    private static let chunkSize = 1 << 20

    /// The largest a data file can legitimately be: the largest map the SDK's snapshot
    /// store uses, twice its largest size cap (16 GiB) and 4 MiB (`SnapshotStore`
    /// never grows its map further, and LMDB never writes beyond its map).
    static let largestStore = 2 * (16 << 30) + (4 << 20)

    /// Reads the file once and checks it: the meta pages, the file's length, and every
    /// tree (see the type's description).
    ///
    /// The pass reads the pages up to the chosen meta page's last one; with no valid
    /// meta page, the whole file up to its last data. A meta page whose last page lies
    /// beyond `maxSize` bytes is damaged, and a file longer than `maxSize` is damage
    /// too: the pass never reads further, and skips the holes of a sparse file, so a
    /// huge file costs no more than the largest store.
    ///
    /// - Throws: ``StoreError`` for an I/O error; damage is in the result.
    func analyze(maxSize: Int = LMDBFile.largestStore) throws(StoreError) -> Analysis {
        var buffer = [UInt8](repeating: 0, count: Self.chunkSize)
        let headLength = try read(into: &buffer, at: 0)
        // The length is taken after the meta pages are read: a writer extends the file
        // before it writes the meta page that needs the new pages.
        let size = try length()
        let (pageSize, metas) = buffer.withUnsafeBytes {
            Self.metas(UnsafeRawBufferPointer(rebasing: $0[0..<headLength]), maxSize: maxSize)
        }
        var a = Analysis(pages: Pages(pageSize: pageSize))
        a.stamp = buffer.withUnsafeBytes { Self.stamp(UnsafeRawBufferPointer(rebasing: $0[0..<headLength]), pageSize: pageSize) }

        if size == 0 { a.fault("data.mdb is empty") }
        if size > maxSize { a.fault("data.mdb is \(size) bytes, beyond the largest store (\(maxSize) bytes)") }
        var valid: [Meta] = []
        for m in metas {
            switch m {
            case .success(let meta): valid.append(meta)
            case .failure(let f): if size > 0 { a.fault(f.text) }
            }
        }
        if valid.count == 2 && valid[0].pageSize != valid[1].pageSize {
            a.fault("meta pages disagree on the page size (\(valid[0].pageSize), \(valid[1].pageSize))")
            valid.removeLast()
        }
        a.bothMetas = valid.count == 2
        // As LMDB picks: the second when its transaction is newer, else the first.
        a.meta = valid.count == 2 ? (valid[0].txnid < valid[1].txnid ? valid[1] : valid[0]) : valid.first

        // The pass: every whole page up to the meta page's last one, chunk by chunk.
        // Pages in a hole of a sparse file read as zeros, which is no page: they are
        // recorded as such without being read.
        let end = min(size, maxSize, a.meta.map { (Int($0.lastPage) + 1) * pageSize } ?? Int.max)
        let pageCount = end / pageSize
        a.pages.kinds.reserveCapacity(pageCount)
        var offset = 0
        var length = min(headLength, end)
        while a.pages.count < pageCount {
            let whole = length / pageSize
            if whole == 0 { break }
            buffer.withUnsafeBytes { b in
                for i in 0..<whole where a.pages.count < pageCount {
                    a.pages.add(UnsafeRawBufferPointer(rebasing: b[(i * pageSize)..<((i + 1) * pageSize)]), index: a.pages.count)
                }
            }
            offset += whole * pageSize
            if offset >= end { break }
            let data = min(dataStart(from: offset), end)
            // Without a meta page no tree is walked, and a page of zeros holds nothing
            // to salvage: the pass ends where the file's data does.
            if a.meta == nil && data == end { break }
            let zeros = (data - offset) / pageSize
            if zeros > 0 {
                a.pages.addZeroPages(zeros)
                offset += zeros * pageSize
            }
            if offset >= end { break }
            length = try read(into: &buffer, at: offset)
            length = min(length, end - offset)
        }

        guard let meta = a.meta else { return a }
        let needed = (Int(meta.lastPage) + 1) * pageSize
        if size < needed {
            a.fault("data.mdb is \(size) bytes; meta page \(meta.slot) (transaction \(meta.txnid)) needs \(needed)")
        }
        a.used = [Bool](repeating: false, count: a.pages.count)
        a.free = [Bool](repeating: false, count: a.pages.count)
        for i in 0..<min(LMDBLayout.metaPages, a.pages.count) { a.used[i] = true }
        var walker = Walker(file: self, meta: meta)
        try walker.walkAll(&a)
        return a
    }

    /// Where the next data at or after `offset` starts (`SEEK_DATA`): `Int.max` when
    /// there is none, `offset` when the file system cannot tell.
    private func dataStart(from offset: Int) -> Int {
        // SEEK_DATA is 3 on Linux; Glibc's module leaves it out (it needs _GNU_SOURCE).
        let at = lseek(fd, off_t(offset), 3)
        if at >= 0 { return Int(at) }
        return errno == ENXIO ? Int.max : offset
    }

    /// Both meta pages as this pass reads them, to compare with what ``stampNow(pageSize:)``
    /// reads later.
    private static func stamp(_ head: UnsafeRawBufferPointer, pageSize: Int) -> [UInt8] {
        var out: [UInt8] = []
        for slot in 0..<LMDBLayout.metaPages {
            let start = slot * pageSize, end = start + LMDBLayout.pageHeader + LMDBLayout.metaSize
            if end <= head.count { out += head[start..<end] }
        }
        return out
    }

    /// Both meta pages as they are now.
    func stampNow(pageSize: Int) throws(StoreError) -> [UInt8] {
        var out: [UInt8] = []
        for slot in 0..<LMDBLayout.metaPages {
            let length = LMDBLayout.pageHeader + LMDBLayout.metaSize
            let b = try bytes(at: slot * pageSize, count: length)
            if b.count == length { out += b }
        }
        return out
    }

    /// The page size and both meta pages. The page size comes from meta page 0; when
    /// that page is damaged, from a valid meta page 1 at one of the sizes LMDB can use;
    /// when both are, from the size at which the most pages carry their own number.
    private static func metas(_ head: UnsafeRawBufferPointer, maxSize: Int) -> (Int, [Result<Meta, Fault>]) {
        let first = Meta.parse(head, slot: 0, maxSize: maxSize)
        func at(_ size: Int) -> UnsafeRawBufferPointer {
            UnsafeRawBufferPointer(rebasing: head[min(size, head.count)...])
        }
        if case .success(let m) = first { return (m.pageSize, [first, Meta.parse(at(m.pageSize), slot: 1, maxSize: maxSize)]) }
        let system = Int(sysconf(Int32(_SC_PAGESIZE)))
        let known = [4096, 8192, 16384, 32768, 65536]
        let sizes = known.contains(system) ? [system] + known.filter { $0 != system } : known
        for size in sizes {
            let second = Meta.parse(at(size), slot: 1, maxSize: maxSize)
            if case .success(let m) = second, m.pageSize == size { return (size, [first, second]) }
        }
        var best = (size: sizes[0], pages: 0)
        for size in sizes {
            var n = 0
            var index = LMDBLayout.metaPages
            while (index + 1) * size <= head.count {
                if head.u64(index * size) == UInt64(index) { n += 1 }
                index += 1
            }
            if n > best.pages { best = (size, n) }
        }
        return (best.size, [first, Meta.parse(at(best.size), slot: 1, maxSize: maxSize)])
    }

    /// Walks the trees of one meta page over the pass's summaries.
    private struct Walker {
        let file: LMDBFile
        let meta: Meta
        /// Current tree's counts.
        private var branches = 0, leaves = 0, overflows = 0, entries = 0

        init(file: LMDBFile, meta: Meta) {
            self.file = file
            self.meta = meta
        }

        mutating func walkAll(_ a: inout Analysis) throws(StoreError) {
            let main = walk(LMDBFile.mainTree, meta.main, keySize: nil, values: LMDBLayout.subData, &a)
            a.trees[LMDBFile.mainTree] = main
            var named: [(String, Record)] = []
            for e in main.entries {
                let node = a.pages.nodes[e.node]
                guard node.flags & LMDBLayout.subData != 0 else { continue }
                let name = String(decoding: try file.key(node, page: e.page, pageSize: a.pageSize), as: UTF8.self)
                let value = try file.value(node, page: e.page, a)
                guard node.flags & LMDBLayout.bigData == 0, value?.count == LMDBLayout.recordSize, let value else {
                    a.fault("main tree: the record of database \(name) is not \(LMDBLayout.recordSize) bytes")
                    a.trees[LMDBFile.mainTree]?.complete = false
                    continue
                }
                named.append((name, value.withUnsafeBytes { Record($0, at: 0) }))
            }

            a.trees[LMDBFile.freeTree] = walk(LMDBFile.freeTree, meta.free, keySize: 8, values: 0, &a)
            for (name, record) in named {
                if let p = record.problem(lastPage: meta.lastPage) {
                    a.fault("\(name) database: \(p)")
                    a.trees[name] = Tree(record: record, complete: false)
                    continue
                }
                if record.flags & LMDBLayout.shapeFlags != 0 {
                    a.fault("\(name) database: flags 0x\(hex(record.flags)) (Cairn's databases have none)")
                    a.trees[name] = Tree(record: record, complete: false)
                    continue
                }
                a.trees[name] = walk(name, record, keySize: name == LMDBFile.snapshotsTree ? 16 : nil, values: 0, &a)
            }
            try freePages(&a)
        }

        /// Walks one tree: every page once, each of the kind its place needs, within
        /// the file and the meta page's last page, all leaves at the record's depth.
        /// Damaged pages are reported and skipped; the rest of the tree is still walked.
        mutating func walk(_ name: String, _ record: Record, keySize: Int?, values: UInt16,
                           _ a: inout Analysis) -> Tree {
            var tree = Tree(record: record)
            guard record.root != LMDBLayout.noPage else { return tree }
            branches = 0; leaves = 0; overflows = 0; entries = 0
            let before = a.faultCount
            visit(record.root, level: 1, name: name, depth: Int(record.depth), keySize: keySize, values: values,
                  &tree, &a)
            if a.faultCount == before {
                let counted = (UInt64(branches), UInt64(leaves), UInt64(overflows), UInt64(entries))
                let recorded = (record.branchPages, record.leafPages, record.overflowPages, record.entries)
                if counted != recorded {
                    a.fault("\(name) tree: \(branches) branch, \(leaves) leaf, \(overflows) overflow pages and "
                            + "\(entries) entries, but its record says \(record.branchPages), \(record.leafPages), "
                            + "\(record.overflowPages) and \(record.entries)")
                }
            }
            tree.complete = a.faultCount == before
            return tree
        }

        private mutating func visit(_ page: UInt64, level: Int, name: String, depth: Int, keySize: Int?,
                                    values: UInt16, _ tree: inout Tree, _ a: inout Analysis) {
            guard let index = locate(page, name: name, &a) else { return }
            switch a.pages.kinds[index] {
            case .branch(let first, let count):
                guard level < depth else { return a.fault("\(name) tree: page \(page) is a branch at the leaf level \(depth)") }
                a.used[index] = true
                branches += 1
                tree.branches.append(index)
                for n in first..<(first + count) {
                    visit(a.pages.nodes[n].page, level: level + 1, name: name, depth: depth, keySize: keySize,
                          values: values, &tree, &a)
                }
            case .leaf(let first, let count):
                guard level == depth else { return a.fault("\(name) tree: page \(page) is a leaf at level \(level) of \(depth)") }
                a.used[index] = true
                leaves += 1
                tree.leaves.append(index)
                entries += count
                for n in first..<(first + count) {
                    let node = a.pages.nodes[n]
                    if let keySize, Int(node.keySize) != keySize {
                        a.fault("\(name) tree: page \(page): a key of \(node.keySize) bytes, not \(keySize)")
                        continue
                    }
                    if node.flags & ~(LMDBLayout.bigData | values) != 0 {
                        a.fault("\(name) tree: page \(page): node flags 0x\(hex(node.flags))")
                        continue
                    }
                    if node.flags & LMDBLayout.bigData != 0 {
                        guard claimOverflow(node, name: name, &a) else { continue }
                        tree.overflows.append(Int(node.page))
                    }
                    tree.entries.append((index, n))
                }
            case .missing:
                a.fault("\(name) tree: page \(page) is beyond the end of the file")
            case .defective(let why):
                a.fault("\(name) tree: page \(page): \(why.text)")
            case .meta, .overflow:
                a.fault("\(name) tree: page \(page) is not a branch or leaf page")
            }
        }

        /// The index of `page`, or nil when it cannot be in a tree (reported). Pages are
        /// marked used only once they prove to be what their place needs, so a leaf
        /// reached from a damaged parent is still read by a salvage's page scan.
        private func locate(_ page: UInt64, name: String, _ a: inout Analysis) -> Int? {
            guard page >= UInt64(LMDBLayout.metaPages), page <= meta.lastPage else {
                a.fault("\(name) tree: page \(page) outside pages 2...\(meta.lastPage)")
                return nil
            }
            guard page < UInt64(a.pages.count) else {
                a.fault("\(name) tree: page \(page) is beyond the end of the file")
                return nil
            }
            let index = Int(page)
            guard !a.used[index] else {
                a.fault("\(name) tree: page \(page) is reached twice")
                return nil
            }
            return index
        }

        /// Checks and marks the overflow pages of a value.
        private mutating func claimOverflow(_ node: Node, name: String, _ a: inout Analysis) -> Bool {
            let page = node.page
            guard page >= UInt64(LMDBLayout.metaPages), page <= meta.lastPage, page < UInt64(a.pages.count),
                  case .overflow(let pages) = a.pages.kinds[Int(page)] else {
                a.fault("\(name) tree: the overflow value at page \(page) is missing or damaged")
                return false
            }
            let start = Int(page)
            guard pages >= LMDBLayout.overflowPages(node.dataSize, pageSize: a.pageSize),
                  UInt64(start + pages - 1) <= meta.lastPage, start + pages <= a.pages.count else {
                a.fault("\(name) tree: the overflow value at page \(page) (\(pages) pages) does not hold "
                        + "its \(node.dataSize) bytes within the file")
                return false
            }
            if let twice = (start..<(start + pages)).first(where: { a.used[$0] }) {
                a.fault("\(name) tree: page \(twice) of an overflow value is reached twice")
                return false
            }
            for i in start..<(start + pages) { a.used[i] = true }
            overflows += pages
            return true
        }

        /// Reads the free-page lists (`MDB_IDL`: a count, then page numbers) and checks
        /// that no page is both free and in a tree.
        private func freePages(_ a: inout Analysis) throws(StoreError) {
            guard let tree = a.trees[LMDBFile.freeTree] else { return }
            for e in tree.entries {
                guard let value = try file.value(a.pages.nodes[e.node], page: e.page, a), value.count >= 8 else {
                    a.fault("free-page tree: a list on page \(e.page) cannot be read")
                    continue
                }
                let ok = value.withUnsafeBytes { b -> Bool in
                    let n = b.u64(0)
                    guard n <= UInt64((b.count - 8) / 8) else {
                        a.fault("free-page tree: a list on page \(e.page) claims \(n) pages in \(b.count) bytes")
                        return false
                    }
                    for i in 0..<Int(n) {
                        let p = b.u64(8 + 8 * i)
                        guard p >= UInt64(LMDBLayout.metaPages), p <= meta.lastPage, p < UInt64(a.free.count) else {
                            a.fault("free-page tree: free page \(p) outside pages 2...\(meta.lastPage)")
                            return false
                        }
                        if a.free[Int(p)] {
                            a.fault("free-page tree: page \(p) is listed free twice")
                            return false
                        }
                        a.free[Int(p)] = true
                    }
                    return true
                }
                if !ok { a.trees[LMDBFile.freeTree]?.complete = false }
            }
            if let both = a.free.indices.first(where: { a.free[$0] && a.used[$0] }) {
                a.fault("page \(both) is both free and in a tree")
            }
        }
    }

    // MARK: Reading entries

    /// The key of `node` on leaf page `page`.
    func key(_ node: Node, page: Int, pageSize: Int) throws(StoreError) -> [UInt8] {
        try bytes(at: page * pageSize + Int(node.keyOffset), count: Int(node.keySize))
    }

    /// The value of `node` on leaf page `page`: in the page, or on its overflow pages
    /// (which the caller has checked); nil when the file ends first.
    func value(_ node: Node, page: Int, _ a: Analysis) throws(StoreError) -> [UInt8]? {
        let offset = node.flags & LMDBLayout.bigData != 0
            ? Int(node.page) * a.pageSize + LMDBLayout.pageHeader
            : page * a.pageSize + Int(node.dataOffset)
        let b = try bytes(at: offset, count: node.dataSize)
        return b.count == node.dataSize ? b : nil
    }
}
