// DeliveryStatus's text for the operator: the collector's URL as it may be printed.
import Testing

@testable import CairnUploader

@Suite struct DeliveryStatusTests {
    /// Credentials, query and fragment never reach a log line; the rest stays as given.
    @Test func aURLIsShownWithoutCredentialsOrQuery() {
        let cases: [(String, String)] = [
            ("https://user:secret@collector.example:8443/v1/batch?key=k#x", "https://collector.example:8443/v1/batch"),
            ("http://token@10.0.0.5/v1/batch", "http://10.0.0.5/v1/batch"),
            ("https://collector.example/v1/@batch", "https://collector.example/v1/@batch"),
            ("https://[::1]:4318/v1/batch", "https://[::1]:4318/v1/batch"),
            ("collector.example/v1/batch?k=v", "collector.example/v1/batch"),
            ("", ""),
            ("://a@b", "://b"),
        ]
        for (url, shown) in cases {
            #expect(DeliveryStatus.display(url) == shown, "\(url)")
        }
    }
}
