/// The SDK's version, sent as `sdk.version` in events and in the uploader's User-Agent
/// (`cairn-swift/<version>`). It is the C cores' `CAIRN_VERSION_STRING` (cairn_core.h),
/// written here again so that the Swift layers need no C; a test
/// (`VersionTests.theSwiftAndCVersionsAgree`) checks that the two never differ.
public let cairnVersion = "0.2.0"

/// The version of the Swift compiler that built Cairn (and so the service, which builds
/// it from source), major.minor: OTLP's `process.runtime.version`.
package let swiftCompilerVersion: String = {
    #if compiler(>=6.4)
    return "6.4"
    #elseif compiler(>=6.3)
    return "6.3"
    #elseif compiler(>=6.2)
    return "6.2"
    #elseif compiler(>=6.1)
    return "6.1"
    #else
    return "6.0"
    #endif
}()
