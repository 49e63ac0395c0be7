// The C response parser (cairn_http_parser_*) fed directly: the same bytes in one piece
// and one byte at a time must give the same response; limits hold.
import CCairnHTTP
import Testing

/// The outcome of parsing `bytes` split into pieces of `piece` bytes (then the close,
/// when `close` is set): status, headers, body, flags, or the error text.
private struct Parsed: Equatable {
    var status = 0
    var headers: [String] = []
    var body: [UInt8] = []
    var truncated = false
    var keepAlive = false
    var error: String?
    var leftover = 0
}

private func parse(_ text: String, piece: Int, bodyCap: Int = 64, close: Bool = false,
                   headerCap: Int = Int(CAIRN_HTTP_MAX_HEADER_BYTES)) -> Parsed {
    let bytes = Array(text.utf8)
    var headerBuffer = [CChar](repeating: 0, count: headerCap)
    var bodyBuffer = [UInt8](repeating: 0, count: bodyCap)
    var parser = cairn_http_parser_t()
    var result = CAIRN_HTTP_PARSE_MORE
    var parsed = Parsed()
    headerBuffer.withUnsafeMutableBufferPointer { headers in
        bodyBuffer.withUnsafeMutableBufferPointer { body in
            cairn_http_parser_init(&parser, headers.baseAddress, headers.count, body.baseAddress, body.count, 0)
            var offset = 0
            while offset < bytes.count && result == CAIRN_HTTP_PARSE_MORE {
                let end = min(offset + piece, bytes.count)
                var used = 0
                result = bytes[offset..<end].withUnsafeBufferPointer {
                    cairn_http_parser_feed(&parser, $0.baseAddress, $0.count, &used)
                }
                parsed.leftover += (end - offset) - used
                offset = end
            }
            parsed.leftover += bytes.count - offset
            if result == CAIRN_HTTP_PARSE_MORE && close { result = cairn_http_parser_finish(&parser) }
            if result == CAIRN_HTTP_PARSE_DONE {
                parsed.status = Int(parser.status)
                parsed.headers = UnsafeRawBufferPointer(start: headers.baseAddress, count: parser.headers_len)
                    .split(separator: 0, omittingEmptySubsequences: false).dropLast()
                    .map { String(decoding: $0, as: UTF8.self) }
                parsed.body = Array(body.prefix(parser.body_len))
                parsed.truncated = parser.body_truncated != 0
                parsed.keepAlive = parser.keep_alive != 0
            } else if result == CAIRN_HTTP_PARSE_ERROR {
                parsed.error = parser.error.map { String(cString: $0) } ?? "?"
            } else {
                parsed.error = "incomplete"
            }
        }
    }
    return parsed
}

@Suite struct HTTPResponseParserTests {
    static let responses = [
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A:  spaced  \r\n\r\nhello",
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early\r\nLink: x\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3;ext=1\r\nabc\r\nA\r\n0123456789\r\n0\r\nT: 1\r\n\r\n",
        "HTTP/1.1 200 OK\nContent-Length: 2\nX-Fold: a\n  b\n\nok",
        "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\n!",
        "HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 3, 3\r\nConnection: close\r\n\r\nabc",
    ]

    @Test(arguments: responses)
    func anySplitGivesTheSameResponse(_ text: String) {
        let whole = parse(text, piece: text.utf8.count)
        #expect(whole.error == nil)
        #expect(whole.leftover == 0)
        for piece in [1, 2, 3, 7] {
            #expect(parse(text, piece: piece) == whole, "piece \(piece)")
        }
    }

    @Test func fieldsAreReadAsSent() {
        let plain = parse(Self.responses[0], piece: 4)
        #expect(plain.status == 200)
        #expect(plain.headers == ["Content-Length", "5", "X-A", "spaced"])
        #expect(plain.body == Array("hello".utf8))
        #expect(plain.keepAlive)
        let interim = parse(Self.responses[1], piece: 5)
        #expect(interim.status == 201)
        #expect(interim.headers == ["Content-Length", "0"])
        let chunked = parse(Self.responses[2], piece: 1, bodyCap: 8)
        #expect(chunked.body == Array("abc01234".utf8))
        #expect(chunked.truncated)
        #expect(chunked.keepAlive)
        #expect(parse(Self.responses[3], piece: 1).headers == ["Content-Length", "2", "X-Fold", "a b"])
        #expect(parse(Self.responses[4], piece: 1).keepAlive)
        #expect(parse(Self.responses[5], piece: 1).body.isEmpty)
        #expect(!parse(Self.responses[6], piece: 1).keepAlive)
        let closeDelimited = parse("HTTP/1.1 200 OK\r\n\r\nto the end", piece: 3, close: true)
        #expect(closeDelimited.body == Array("to the end".utf8))
        #expect(!closeDelimited.keepAlive)
        #expect(parse("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nab", piece: 100).leftover == 1)
    }

    @Test func malformedResponsesFail() {
        let bad = [
            "HTTP/2 200 OK\r\n\r\n",
            "HTTP/1.1 99 Low\r\n\r\n",
            "HTTP/1.1 200 OK\r\n: no name\r\n\r\n",
            "HTTP/1.1 200 OK\r\nA\u{0}B: c\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n",
            "HTTP/1.1 101 Switching Protocols\r\n\r\n",
            String(repeating: "HTTP/1.1 100 Continue\r\n\r\n", count: 40),
        ]
        for text in bad {
            let parsed = parse(text, piece: 1)
            #expect(parsed.error != nil && parsed.error != "incomplete", "\(text.debugDescription)")
        }
        let huge = "HTTP/1.1 200 OK\r\nX: " + String(repeating: "v", count: 100) + "\r\n\r\n"
        #expect(parse(huge, piece: 9, headerCap: 64).error == "the response headers are too large")
        #expect(parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", piece: 1, close: true).error
                == "the server closed the connection before the response was complete")
    }
}
