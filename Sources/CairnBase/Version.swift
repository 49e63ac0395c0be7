/// The SDK's version, sent as `sdk.version` in events and in the uploader's User-Agent
/// (`cairn-swift/<version>`). It is the C cores' `CAIRN_VERSION_STRING` (cairn_core.h),
/// written here again so that the Swift layers need no C; a test
/// (`VersionTests.theSwiftAndCVersionsAgree`) checks that the two never differ.
public let cairnVersion = "0.2.0"
