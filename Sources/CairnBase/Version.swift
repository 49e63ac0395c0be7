/// The SDK's version, sent as `sdk.version` in events and in the uploader's User-Agent
/// (`cairn-swift/<version>`).
public let cairnVersion = "0.2.0"
