import CCairnCore

/// An error reported by Cairn's C core: the function that failed, its code, and the
/// core's description of that code.
///
/// Negative codes are Cairn's own (`CAIRN_E*`, see `CCairn.h`); positive codes are
/// `errno` values from a system call the core made.
public struct CairnError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The C function that reported the error, such as `"cairn_ring_open"`.
    public let function: String
    /// The raw code: a negative `CAIRN_E*` value or a positive `errno`.
    public let code: Int32

    /// Creates an error for `code` returned by `function`.
    public init(_ code: Int32, function: String) {
        self.code = code
        self.function = function
    }

    /// The core's description of ``code``.
    public var message: String { String(cString: cairn_strerror(code)) }

    /// `"<function>: <message> (<code>)"`.
    public var description: String { "\(function): \(message) (\(code))" }

    /// The ring had no room; the record was dropped and counted.
    public static let full = CAIRN_EFULL
    /// The record exceeds the ring's maximum record size.
    public static let tooBig = CAIRN_ETOOBIG
    /// Another handle owns the ring file.
    public static let locked = CAIRN_ELOCKED
    /// Input is damaged.
    public static let corrupt = CAIRN_ECORRUPT
    /// Input ends early.
    public static let truncated = CAIRN_ETRUNCATED
    /// Unsupported format version.
    public static let version = CAIRN_EVERSION
    /// Output buffer too small.
    public static let bufferSize = CAIRN_EBUFSIZE
    /// Decoded size over the configured maximum.
    public static let limit = CAIRN_ELIMIT
    /// Missing or mismatched zstd dictionary.
    public static let dictionary = CAIRN_EDICT
    /// Invalid argument.
    public static let invalid = CAIRN_EINVAL
}

/// Calls a C core function returning a Cairn status code and throws a ``CairnError``
/// carrying `function` when it is not 0.
@inline(__always)
package func cairnCheck(_ function: String, _ body: () -> Int32) throws(CairnError) {
    let rc = body()
    if rc != 0 { throw CairnError(rc, function: function) }
}
