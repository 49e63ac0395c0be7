// What `import Cairn` brings besides the Cairn module's own types: the value types its
// public API takes and returns, declared in the modules it is built from. A service needs
// no other import; the modules themselves (CairnProcessor, CairnUploader, CairnStore,
// CairnCrash) stay available to those who use them directly.

// Why events were dropped (`Cairn.dropCounts`), and the SDK's version.
@_exported import enum CairnBase.DropReason
@_exported import let CairnBase.cairnVersion

// Events, identities and traces.
@_exported import enum CairnProcessor.CairnValue
@_exported import struct CairnProcessor.Identity
@_exported import enum CairnBase.Tier
@_exported import enum CairnProcessor.EventType
@_exported import struct CairnProcessor.SpanContext
@_exported import struct CairnProcessor.TraceID
@_exported import struct CairnProcessor.SpanID
@_exported import struct CairnProcessor.TraceParent

// The options of `Cairn.Options` that are types of their own.
@_exported import struct CairnProcessor.SamplingOptions
@_exported import struct CairnProcessor.PrivacyOptions
@_exported import enum CairnProcessor.KeyAction
@_exported import struct CairnProcessor.SanitizerLimits
@_exported import struct CairnProcessor.EventFilterOptions
@_exported import struct CairnProcessor.DedupOptions

// A transport of one's own (`Cairn.Options.transport`), the default one's settings, and
// upload logs (`Cairn.Options.uploadObserver`).
@_exported import protocol CairnUploader.Transport
@_exported import class CairnUploader.HTTPTransport
@_exported import enum CairnUploader.TransportResult
@_exported import struct CairnUploader.TransportResponse
@_exported import struct CairnUploader.TransportFailure
@_exported import protocol CairnUploader.UploadObserver
@_exported import struct CairnUploader.UploadStartLog
@_exported import struct CairnUploader.UploadResultLog
@_exported import struct CairnUploader.UploadRequest
@_exported import struct CairnUploader.HTTPHeader
