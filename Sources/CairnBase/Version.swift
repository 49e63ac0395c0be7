import CCairn

/// The SDK's version, sent as `sdk.version` in events and in the uploader's User-Agent
/// (`cairn-swift/<version>`): the C core's `CAIRN_VERSION_STRING` (CCairn.h), the one
/// place it is written.
public let cairnVersion = CAIRN_VERSION_STRING
