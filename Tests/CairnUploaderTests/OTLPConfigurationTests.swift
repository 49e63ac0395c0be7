import CairnProcessor
import CairnUploader
import Testing

/// The OTLP destination from the standard OpenTelemetry environment (docs/FORMATS.md,
/// "OTLP export", "Configuration"): endpoints, per-signal settings over common ones,
/// header and attribute lists, and every value that cannot be used refused by name.
@Suite struct OTLPConfigurationTests {
    typealias Config = OTLPConfiguration

    @Test func noEndpointNoDestination() {
        let (config, disabled, problems) = Config.fromEnvironment(["OTEL_SERVICE_NAME": "orders", "PATH": "/bin"])
        #expect(config == nil && !disabled && problems.isEmpty)
    }

    /// Only the base endpoint: both signals, by the specification's paths, with the
    /// defaults (protobuf, no compression, 10 s).
    @Test func baseEndpointGivesBothSignals() throws {
        for base in ["http://collector:4318", "http://collector:4318/", "  http://collector:4318 "] {
            let (config, _, problems) = Config.fromEnvironment(["OTEL_EXPORTER_OTLP_ENDPOINT": base])
            #expect(problems.isEmpty)
            let c = try #require(config)
            #expect(c.logs?.url == "http://collector:4318/v1/logs" && c.traces?.url == "http://collector:4318/v1/traces")
            #expect(c.metrics?.url == "http://collector:4318/v1/metrics")
            #expect(c.logs?.encoding == .protobuf && c.logs?.compression == Config.Compression.none)
            #expect(c.logs?.timeout == .seconds(10) && c.logs?.headers == [])
        }
        let (prefixed, _, _) = Config.fromEnvironment(["OTEL_EXPORTER_OTLP_ENDPOINT": "https://otel.example/api/"])
        #expect(prefixed?.traces?.url == "https://otel.example/api/v1/traces")
    }

    /// A signal's own variables win over the common ones; its endpoint is used as given;
    /// a signal with no endpoint at all is not sent.
    @Test func perSignalSettings() throws {
        let env = [
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://tempo:4318/custom/traces",
            "OTEL_EXPORTER_OTLP_COMPRESSION": "GZIP",
            "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "zstd",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "2500",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
            "OTEL_EXPORTER_OTLP_HEADERS": "api-key=abc,x-tenant=shop",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "API-Key=def%20ghi, x-extra = 1 ",
            "OTEL_SERVICE_NAME": "orders-api",
            "OTEL_RESOURCE_ATTRIBUTES": "service.namespace=shop,team=pay%2Cments,,region= eu ",
        ]
        let (config, disabled, problems) = Config.fromEnvironment(env)
        #expect(problems.isEmpty && !disabled)
        let c = try #require(config)
        #expect(c.logs == nil, "no logs endpoint, and no base")
        let t = try #require(c.traces)
        #expect(t.url == "http://tempo:4318/custom/traces" && t.compression == .zstd && t.encoding == .json)
        #expect(t.timeout == .milliseconds(2500))
        #expect(t.headers == [HTTPHeader("x-tenant", "shop"), HTTPHeader("API-Key", "def ghi"), HTTPHeader("x-extra", "1")])
        #expect(c.serviceName == "orders-api")
        #expect(c.resourceAttributes.map { "\($0.key)=\($0.value)" } == ["service.namespace=shop", "team=pay,ments", "region=eu"])
    }

    /// Every value that cannot be used is refused, naming the variable it came from.
    @Test(arguments: [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://collector"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "brotli"),
        ("OTEL_EXPORTER_OTLP_LOGS_COMPRESSION", "gz"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "0"),
        ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "600001"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/proto"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "api-key"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "=value"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=abc%2"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "bad name=1"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x=a%0D%0AInjected: yes"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x=%FF"),
        ("OTEL_RESOURCE_ATTRIBUTES", "team"),
        ("OTEL_SDK_DISABLED", "yes"),
    ])
    func unusableValuesAreRefusedByName(variable: String, value: String) {
        var env = ["OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"]
        env[variable] = value
        let (_, _, problems) = Config.fromEnvironment(env)
        #expect(problems.map(\.variable).contains(variable), "\(variable)=\(value): \(problems)")
        #expect(problems.allSatisfy { $0.raw == env[$0.variable] })
    }

    /// A signal's own endpoint alone exports that signal alone: metrics, with their own
    /// headers added to the common ones.
    @Test func metricsEndpointAlone() throws {
        let (config, _, problems) = Config.fromEnvironment([
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://mimir:4318/otlp/v1/metrics",
            "OTEL_EXPORTER_OTLP_HEADERS": "x-tenant=a", "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "x-scope=m",
        ])
        #expect(problems.isEmpty)
        let c = try #require(config)
        #expect(c.logs == nil && c.traces == nil && c.metrics?.url == "http://mimir:4318/otlp/v1/metrics")
        #expect(c.metrics?.headers.map(\.name) == ["x-tenant", "x-scope"])
        #expect(c.signal(for: .otlpMetrics) == c.metrics && c.signal(.metrics) == c.metrics && c.signals.count == 1)
    }

    @Test func sdkDisabled() {
        #expect(Config.fromEnvironment(["OTEL_SDK_DISABLED": "TRUE"]).disabled)
        #expect(!Config.fromEnvironment(["OTEL_SDK_DISABLED": "false"]).disabled)
        #expect(!Config.fromEnvironment(["OTEL_SDK_DISABLED": " "]).disabled)
    }

    @Test func percentDecodingOfLists() throws {
        let list = try #require(Config.keyValueList("a%3Db=c%25d, e=%E2%82%AC"))
        #expect(list.map(\.key) == ["a=b", "e"] && list.map(\.value) == ["c%d", "€"])
        #expect(Config.keyValueList("k=%zz") == nil && Config.keyValueList("k=v,=w") == nil)
        #expect(Config.keyValueList("")?.isEmpty == true && Config.keyValueList(" , ,")?.isEmpty == true)
    }
}
