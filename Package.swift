// swift-tools-version:6.1
//
// Cairn: telemetry and crash capture for long-running Linux services.
// Two C cores do what must be fast or signal-safe: the storage core (CCairnCore: ring,
// frames) that any part may link, and the crash core (CCairnCrash: signal handlers,
// alternate stacks) that only crash capture links. Swift modules build on them.
import PackageDescription

// No compiler flags here: a package whose targets carry unsafe flags cannot be used as a
// versioned dependency. `make cwarn` (part of `make test`) builds the C sources with
// -Wall -Wextra -Werror instead.
// The library modules: Swift 6, and imports that show what leaks. An import is internal
// unless marked `public import` (so a public API that exposes another module's type says
// so), and a member is found only through a module this file imports.
let strictSwift: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("InternalImportsByDefault"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

// The Swift server ecosystem's integrations, each a product of its own behind a package
// trait of the same name, off by default: a service that depends on `Cairn` alone
// resolves none of these packages (SwiftPM fetches a dependency only for an enabled
// trait that uses it). Requirements are the lowest releases with the APIs used.
//   .package(url: "https://github.com/…/cairn-swift.git", from: "…", traits: ["Logging"])
let ecosystem: [(trait: String, package: Package.Dependency, products: [(name: String, package: String)])] = [
    ("Logging", .package(url: "https://github.com/apple/swift-log.git", from: "1.5.0"),
     [("Logging", "swift-log")]),
    ("Metrics", .package(url: "https://github.com/apple/swift-metrics.git", from: "2.4.0"),
     [("CoreMetrics", "swift-metrics"), ("Metrics", "swift-metrics")]),
    ("ServiceLifecycle", .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.0.0"),
     [("ServiceLifecycle", "swift-service-lifecycle")]),
]
/// The products of the ecosystem packages that `traits` enable, for a target's dependencies.
@MainActor func ecosystemProducts(_ traits: String...) -> [Target.Dependency] {
    ecosystem.filter { traits.contains($0.trait) }.flatMap { entry in
        entry.products.map { .product(name: $0.name, package: $0.package, condition: .when(traits: [entry.trait])) }
    }
}

let package = Package(
    name: "Cairn",
    // `import Cairn` is the whole Swift API; the modules it is built from are targets
    // only, sharing what they must with `package` access. CCairn is the C library other
    // SDKs link (also `make lib`).
    products: [
        .library(name: "Cairn", targets: ["Cairn"]),
        .library(name: "CairnTestKit", targets: ["CairnTestKit"]),
        .executable(name: "cairn", targets: ["cairn"]),
        .library(name: "CCairn", targets: ["CCairnCore", "CCairnCrash"]),
        // swift-log's backend (trait "Logging").
        .library(name: "CairnLogging", targets: ["CairnLogging"]),
        // swift-metrics' backend (trait "Metrics").
        .library(name: "CairnMetrics", targets: ["CairnMetrics"]),
        // A swift-service-lifecycle Service (trait "ServiceLifecycle").
        .library(name: "CairnServiceLifecycle", targets: ["CairnServiceLifecycle"]),
    ],
    traits: [
        .trait(name: "Logging", description: "CairnLogging: a swift-log LogHandler that tracks log records as Cairn events"),
        .trait(name: "Metrics", description: "CairnMetrics: a swift-metrics MetricsFactory that reports metrics as Cairn events"),
        .trait(name: "ServiceLifecycle",
               description: "CairnServiceLifecycle: Cairn as a swift-service-lifecycle Service, shut down with its ServiceGroup"),
        .default(enabledTraits: []),
    ],
    dependencies: ecosystem.map(\.package),
    targets: [
        // System libraries from Debian's packages.
        .systemLibrary(name: "CZstd", path: "CSources/CZstd", pkgConfig: "libzstd",
                       providers: [.apt(["libzstd-dev"])]),
        .systemLibrary(name: "CLMDB", path: "CSources/CLMDB", pkgConfig: "lmdb",
                       providers: [.apt(["liblmdb-dev"])]),
        .systemLibrary(name: "CUnwind", path: "CSources/CUnwind", pkgConfig: "libunwind",
                       providers: [.apt(["libunwind-dev"])]),

        // Cairn's HTTP/1.1 client (one public header, cairn_http.h). Its two TLS back ends
        // take their types from mbedTLS's and OpenSSL's headers (libmbedtls-dev,
        // libssl-dev) and load the libraries with dlopen at the first https request, so
        // nothing links against them; a back end built without its headers says so at
        // its first use, and the other one serves.
        .target(name: "CCairnHTTP", path: "CSources/CCairnHTTP"),

        // The storage core: mmap ring buffer, zstd framing, error codes and versions (one
        // public header, cairn_core.h). No threads, no signal handlers, no libc symbols.
        .target(name: "CCairnCore", dependencies: ["CZstd"], path: "CSources/CCairnCore"),
        // The crash core: crash handler and reports, alternate signal stacks (the
        // `pthread_create` hook), termination signals, thread start (cairn_crash.h).
        .target(name: "CCairnCrash", dependencies: ["CCairnCore", "CUnwind"], path: "CSources/CCairnCrash"),

        // What every Swift layer needs: locks, threads, small files, the SDK version. No C.
        .target(name: "CairnBase", path: "Sources/CairnBase", swiftSettings: strictSwift),

        // The snapshot store's guard for LMDB versions whose file layout it does not know:
        // LMDB reads the store in a forked child (cairn_store_guard.h; not in libcairn).
        .target(name: "CCairnStoreGuard", dependencies: ["CLMDB"], path: "CSources/CCairnStoreGuard"),

        // Swift wrappers of the storage core, and the LMDB snapshot store.
        .target(name: "CairnStore", dependencies: ["CairnBase", "CCairnCore", "CLMDB", "CCairnStoreGuard"], path: "Sources/CairnStore",
                swiftSettings: strictSwift),

        // A child process for the crash tests: installs the handler and crashes.
        .executableTarget(name: "cairn-crash-child", dependencies: ["CCairnCrash"], path: "Tests/CrashChild"),
        .executableTarget(name: "cairn-swift-crash-child", dependencies: ["CCairnCrash"], path: "Tests/SwiftCrashChild"),

        // Batching, transport, retries and logs: ring -> batch -> snapshot -> collector.
        .target(name: "CairnUploader", dependencies: ["CairnBase", "CairnStore", "CairnProcessor", "CCairnCore", "CCairnHTTP", "CZstd"],
                path: "Sources/CairnUploader",
                swiftSettings: strictSwift),

        // The event processor: values in, bytes out (schema, common properties,
        // sanitising, privacy, sampling, filtering, JSON). No files, no threads.
        .target(name: "CairnProcessor", dependencies: ["CairnBase"], path: "Sources/CairnProcessor",
                swiftSettings: strictSwift),
        .testTarget(name: "CairnProcessorTests", dependencies: ["CairnBase", "CairnProcessor", "CairnTestSupport"],
                    path: "Tests/CairnProcessorTests"),

        // Crash capture around the C handler: run records, session end reasons, and the
        // next start's symbolicated crash events.
        .target(name: "CairnCrash", dependencies: ["CairnBase", "CCairnCore", "CCairnCrash", "CairnStore", "CairnProcessor", "CZstd"],
                path: "Sources/CairnCrash",
                swiftSettings: strictSwift),
        // A Swift service that starts crash capture and then crashes or ends as told.
        .executableTarget(name: "cairn-run-child", dependencies: ["CairnCrash", "CairnProcessor", "CairnStore", "CairnUploader"], path: "Tests/RunChild"),
        .testTarget(name: "CairnCrashTests",
                    dependencies: ["CairnBase", "CairnCrash", "CairnProcessor", "CairnStore", "CCairnCrash", "CairnTestSupport", "cairn-crash-child",
                                  "cairn-swift-crash-child",
                                  "cairn-run-child", "cairn", "cairn-service-child"],
                    path: "Tests/CairnCrashTests"),

        // The public API: start, track, identity, user properties, spans, destinations.
        .target(name: "Cairn", dependencies: ["CairnBase", "CairnProcessor", "CairnCrash", "CairnUploader", "CairnStore", "CCairnCrash"],
                path: "Sources/Cairn", swiftSettings: strictSwift),
        // The ecosystem's integrations: each builds empty unless its trait is enabled.
        .target(name: "CairnLogging", dependencies: ["Cairn", "CairnBase", "CairnProcessor"] + ecosystemProducts("Logging"),
                path: "Sources/CairnLogging", swiftSettings: strictSwift),
        .target(name: "CairnMetrics", dependencies: ["Cairn", "CairnBase", "CairnProcessor"] + ecosystemProducts("Metrics"),
                path: "Sources/CairnMetrics", swiftSettings: strictSwift),
        .target(name: "CairnServiceLifecycle", dependencies: ["Cairn"] + ecosystemProducts("ServiceLifecycle"),
                path: "Sources/CairnServiceLifecycle", swiftSettings: strictSwift),
        // A service that uses Cairn through the ecosystem's APIs, for their tests.
        .executableTarget(name: "cairn-ecosystem-child",
                          dependencies: ["Cairn", "CairnLogging", "CairnMetrics", "CairnServiceLifecycle"]
                              + ecosystemProducts("Logging", "Metrics", "ServiceLifecycle"),
                          path: "Tests/EcosystemChild"),
        .testTarget(name: "CairnEcosystemTests",
                    dependencies: ["CairnTestSupport", "cairn-ecosystem-child"],
                    path: "Tests/CairnEcosystemTests"),
        // For integrators' tests: an in-memory destination that records events.
        .target(name: "CairnTestKit", dependencies: ["Cairn"], path: "Sources/CairnTestKit",
                swiftSettings: strictSwift),
        // A service using the public API, for the end-to-end and cross-process tests.
        .executableTarget(name: "cairn-service-child", dependencies: ["Cairn", "CairnTestKit"], path: "Tests/ServiceChild"),
        .testTarget(name: "CairnTests",
                    dependencies: ["CairnBase", "Cairn", "CairnTestKit", "CairnProcessor", "CairnStore", "CairnUploader", "CairnTestSupport",
                                  "cairn-service-child", "cairn", "cairn-crash-child",
                                  "CairnBenchmarks", "cairn-bench-host", "cairn-bench-baseline",
                                  "cairn-bench-host-essentials", "cairn-bench-baseline-essentials"],
                    path: "Tests/CairnTests"),

        // A child process for kill tests: appends to a ring until it is SIGKILLed.
        .executableTarget(name: "cairn-ring-child", dependencies: ["CCairnCore"],
                          path: "Tests/RingChild"),

        .testTarget(name: "CCairnTests",
                    dependencies: ["CCairnCore", "CCairnCrash", "CairnBase", "CZstd", "CLMDB", "CUnwind", "CairnTestSupport", "cairn-ring-child", "cairn-upload-child",
                                  "cairn-crash-child", "cairn-swift-crash-child"],
                    path: "Tests/CCairnTests"),
        // A child process for the store's fault tests: opens a store read-write, as a service does.
        .executableTarget(name: "cairn-store-child", dependencies: ["CairnStore", "CairnUploader", "CairnTestSupport"],
                          path: "Tests/StoreChild"),
        .testTarget(name: "CairnStoreTests", dependencies: ["CairnBase", "CairnStore", "CairnUploader", "CZstd", "CLMDB", "CairnTestSupport",
                                                            "cairn-store-child", "cairn"],
                    path: "Tests/CairnStoreTests"),
        // A child process for the uploader's kill tests: tracks and uploads until killed.
        .executableTarget(name: "cairn-upload-child", dependencies: ["CairnUploader", "CairnStore"],
                          path: "Tests/UploadChild"),
        // A child process for the transport tests: one request, then what it has mapped.
        .executableTarget(name: "cairn-http-child", dependencies: ["CairnUploader", "CairnStore", "CCairnHTTP"],
                          path: "Tests/HTTPChild"),
        // Test support shared by test targets: the scripted Python collector as a child
        // process, and a control client that does not use the transport under test.
        .target(name: "CairnTestSupport", path: "Tests/Support"),
        .testTarget(name: "CairnUploaderTests",
                    dependencies: ["CairnBase", "CairnProcessor", "CairnUploader", "CCairnHTTP", "CairnStore", "CairnTestSupport", "cairn-upload-child",
                                  "cairn-http-child"],
                    path: "Tests/CairnUploaderTests"),

        // The `cairn` command: stored events, status, crash reports.
        .executableTarget(name: "cairn", dependencies: ["Cairn", "CairnBase", "CairnCrash", "CairnProcessor", "CairnStore", "CairnUploader"], path: "Sources/CairnCLI"),

        // The demo service of `make demo` (Examples/demo.sh).
        .executableTarget(name: "orders-service", dependencies: ["Cairn"], path: "Examples/OrdersService"),

        // The whole-process benchmark's host service, with and without Cairn: the same
        // program (BenchHost), so that their difference is what Cairn costs a service.
        // Two pairs: a service that uses Foundation, and one on FoundationEssentials alone.
        .target(name: "BenchHost", path: "Benchmarks/BenchHost"),
        .target(name: "BenchFoundation", dependencies: ["BenchHost"], path: "Benchmarks/BenchFoundation"),
        .target(name: "CairnBenchHost", dependencies: ["BenchHost", "Cairn"], path: "Benchmarks/CairnBenchHost"),
        .executableTarget(name: "cairn-bench-host", dependencies: ["BenchFoundation", "CairnBenchHost"],
                          path: "Benchmarks/HostWithCairn"),
        .executableTarget(name: "cairn-bench-baseline", dependencies: ["BenchFoundation", "BenchHost"],
                          path: "Benchmarks/HostBaseline"),
        .executableTarget(name: "cairn-bench-host-essentials", dependencies: ["BenchHost", "CairnBenchHost"],
                          path: "Benchmarks/HostWithCairnEssentials"),
        .executableTarget(name: "cairn-bench-baseline-essentials", dependencies: ["BenchHost"],
                          path: "Benchmarks/HostBaselineEssentials"),

        // Benchmarks: a plain executable; `make bench` runs it in release mode.
        .executableTarget(name: "CairnBenchmarks",
                          dependencies: ["CairnBase", "CCairnCore", "CCairnCrash", "CZstd", "CLMDB", "CairnStore", "CairnUploader", "CairnCrash", "Cairn",
                                         "CairnProcessor", "CairnLogging", "CairnMetrics"] + ecosystemProducts("Logging", "Metrics"),
                          path: "Benchmarks/CairnBenchmarks"),
    ],
    cLanguageStandard: .gnu11
)
