import CCairnCore

/// An error reported by Cairn's C core: the function that failed, its code, and the
/// core's description of that code.
///
/// Negative codes are Cairn's own (`CAIRN_E*`, see `CCairn.h`); positive codes are
/// `errno` values from a system call the core made.
package struct CairnError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The C function that reported the error, such as `"cairn_ring_open"`.
    package let function: String
    /// The raw code: a negative `CAIRN_E*` value or a positive `errno`.
    package let code: Int32

    /// Creates an error for `code` returned by `function`.
    package init(_ code: Int32, function: String) {
        self.code = code
        self.function = function
    }

    /// The core's description of ``code``.
    package var message: String { String(cString: cairn_strerror(code)) }

    /// `"<function>: <message> (<code>)"`.
    package var description: String { "\(function): \(message) (\(code))" }

    /// The ring had no room; the record was dropped and counted.
    package static let full = CAIRN_EFULL
    /// The record exceeds the ring's maximum record size.
    package static let tooBig = CAIRN_ETOOBIG
    /// Another handle owns the ring file.
    package static let locked = CAIRN_ELOCKED
    /// Input is damaged.
    package static let corrupt = CAIRN_ECORRUPT
    /// Input ends early.
    package static let truncated = CAIRN_ETRUNCATED
    /// Unsupported format version.
    package static let version = CAIRN_EVERSION
    /// Output buffer too small.
    package static let bufferSize = CAIRN_EBUFSIZE
    /// Decoded size over the configured maximum.
    package static let limit = CAIRN_ELIMIT
    /// Missing or mismatched zstd dictionary.
    package static let dictionary = CAIRN_EDICT
    /// Invalid argument.
    package static let invalid = CAIRN_EINVAL
}

/// Calls a C core function returning a Cairn status code and throws a ``CairnError``
/// carrying `function` when it is not 0.
@inline(__always)
package func cairnCheck(_ function: String, _ body: () -> Int32) throws(CairnError) {
    let rc = body()
    if rc != 0 { throw CairnError(rc, function: function) }
}
