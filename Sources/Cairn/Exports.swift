// What `import Cairn` brings besides the Cairn module's own types: the value types its
// public API takes and returns, declared in the modules it is built from. `import Cairn`
// is the whole API: the modules below it (CairnProcessor, CairnUploader, CairnStore,
// CairnCrash, CairnBase) are not products, and share the rest with `package` access.

// The SDK's version.
@_exported import let CairnBase.cairnVersion

// Events, identities and traces.
@_exported import enum CairnProcessor.CairnValue
@_exported import struct CairnProcessor.Identity
@_exported import enum CairnBase.Tier
@_exported import struct CairnProcessor.SpanContext
@_exported import struct CairnProcessor.TraceID
@_exported import struct CairnProcessor.SpanID
@_exported import struct CairnProcessor.TraceState
@_exported import enum CairnProcessor.SpanKind

// The options of `Cairn.Options` that are types of their own.
@_exported import struct CairnProcessor.SamplingOptions
@_exported import struct CairnProcessor.PrivacyOptions
@_exported import enum CairnProcessor.KeyAction
@_exported import struct CairnProcessor.SanitizerLimits
@_exported import struct CairnProcessor.EventFilterOptions
@_exported import struct CairnProcessor.DedupOptions
@_exported import enum CairnUploader.TLSLibrary

// Upload logs (`Cairn.Options.uploadObserver`).
@_exported import protocol CairnUploader.UploadObserver
@_exported import struct CairnUploader.UploadStartLog
@_exported import struct CairnUploader.UploadResultLog
