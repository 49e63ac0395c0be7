#!/usr/bin/env python3
"""A small HTTP collector for Cairn's tests and demo.

It records every upload attempt, decodes batch bodies independently of Cairn's code
(Python's `zstandard`, docs/FORMATS.md "Batch frame"), and answers as it is told.

Usage: collector.py [--host 127.0.0.1] [--port 0] [--ignore-stdin] [--tls PEM]
                    [--client-ca PEM]   (with --tls: require a client certificate signed by it)

The first line on stdout is `PORT <n>`; nothing else is written there. It serves until
stdin reaches end of file (so it never outlives a test process that dies), or until
SIGTERM or SIGINT; `--ignore-stdin` serves until a signal only. `--tls PEM` serves
HTTPS with the certificate and key in PEM (Tests/Collector/selfsigned.pem is a
self-signed one for 127.0.0.1, which clients that verify certificates must refuse).

Data: any POST (also PUT, PATCH, DELETE) to a path outside /_control/ is recorded as an
attempt and answered with the next scripted response. A request to a path ending in
/v1/logs, /v1/traces or /v1/metrics is an OTLP/HTTP export: its body is decompressed (gzip, zstd)
and decoded with the official definitions (opentelemetry-proto, strictly; see
Tests/Tools/otlp_decode.py) into the attempt's "otlp" (and "otlp_signal"), or the
reason it could not be into "error". An attempt whose Idempotency-Key
was answered 2xx before is answered 200 again without using the script (recorded with
"replayed": true), as docs/FORMATS.md asks of a collector: it holds that batch.

Control:
  POST /_control/script    a JSON list of responses used in order by later data
                           requests, replacing the pending ones. Each is an object:
                             {"status": 500}             (status 200..599, default 200)
                             {"status": 429, "retry_after": "2"}   Retry-After header
                                                         (seconds or an HTTP date)
                             {"status": 400, "body": "bad"}        response body
                             {"body_hex": "0a05...", "content_type":
                              "application/x-protobuf"}   a binary body (an OTLP
                                                         answer), and its type
                             {"headers": {"X-A": "b"}}   extra response headers
                             {"stall": 5}                sleep 5 s, then answer
                             {"drop": true}              close without answering
                             {"close": true}             answer with Connection: close,
                                                         then close
                             {"close_after": true}       answer as usual (keep-alive),
                                                         then close the connection
                             {"chunked": true}           send the body chunked, with a
                                                         trailer
                             {"raw": "text"}             write these bytes instead of a
                                                         response, then close
                             {"early": true}             answer as soon as the headers are
                                                         read, before the body (with
                                                         Connection: close), then wait
                                                         "stall" seconds reading nothing,
                                                         then close
  POST /_control/default   one such object, used when the script is empty
                           (initially {"status": 200})
  POST /_control/expect    what a real collector checks before anything else:
                           {"api_key": "k"} answers 401 to a request without
                           `Authorization: Bearer k`; {"path": "/v1/batch"} answers 404
                           to a request for another path; {"max_body": n} answers 413
                           to a request whose Content-Length is over n bytes, as soon as
                           its headers are read, then reads nothing for 2 s and closes
                           (the script is not used up)
  GET  /_control/requests  every recorded attempt, oldest first (JSON list)
  GET  /_control/events    records of attempts answered 2xx, each with its
                           idempotency key: [{"idempotency_key": k, "batch_id": b,
                           "record": "..."}]; duplicates are kept
  POST /_control/reset     forget attempts and script; default back to 200

Exit status 3 when the `zstandard` module is missing (`make deps` installs it).
"""
import argparse
import base64
import hashlib
import io
import json
import signal
import socket
import ssl
import struct
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

try:
    import zstandard
except ImportError:
    print("collector.py: the Python module 'zstandard' is missing "
          "(`make deps` installs it)", file=sys.stderr)
    sys.exit(3)

SKIPPABLE_MAGIC = 0x184D2A5C
META_V1 = struct.Struct("<4sHHQIIQ")  # tag, version, flags, batch id, count, dict id, size
MAX_BODY = 64 * 1024 * 1024          # larger request bodies are refused (400)
MAX_DECODED = 64 * 1024 * 1024       # decompression stops beyond this (bomb guard)
MAX_KEPT_BODY = 1024 * 1024          # bodies up to this size are kept as base64
RESPONSE_KEYS = {"status", "retry_after", "body", "body_hex", "content_type", "headers", "stall", "drop",
                 "close", "close_after", "chunked", "raw", "early"}
OTLP_SIGNALS = {"/v1/logs": "logs", "/v1/traces": "traces", "/v1/metrics": "metrics"}


def decode_otlp(signal, content_type, content_encoding, body):
    """Decodes an OTLP/HTTP request body with the official definitions (Tests/Tools/
    otlp_decode.py: strictly), after its Content-Encoding: the message as a dict."""
    import gzip
    tools = __file__.rsplit("/", 2)[0] + "/Tools"
    if tools not in sys.path:
        sys.path.insert(0, tools)
    import otlp_decode  # noqa: E402 - the official definitions are only needed here
    encoding = (content_encoding or "").strip().lower()
    if encoding == "gzip":
        body = gzip.decompress(body)
    elif encoding == "zstd":
        body = zstandard.ZstdDecompressor().decompress(body, max_output_size=MAX_DECODED)
    elif encoding not in ("", "identity"):
        raise ValueError("unknown Content-Encoding %r" % content_encoding)
    kind = (content_type or "").split(";")[0].strip().lower()
    if kind == "application/x-protobuf":
        return otlp_decode.decode(signal, "protobuf", body)
    if kind == "application/json":
        return otlp_decode.decode(signal, "json", body)
    raise ValueError("Content-Type %r is not an OTLP/HTTP one" % content_type)


class BadRequest(Exception):
    """The request's framing could not be read; answered 400 and the connection closed."""


def validate_response(entry):
    """Returns a problem with a scripted response, or None when it is usable."""
    if not isinstance(entry, dict):
        return "a response must be a JSON object, got %r" % (entry,)
    unknown = set(entry) - RESPONSE_KEYS
    if unknown:
        return "unknown keys %s in %r" % (sorted(unknown), entry)
    status = entry.get("status", 200)
    if isinstance(status, bool) or not isinstance(status, int) or not 200 <= status <= 599:
        return "status must be an integer in 200...599, got %r" % (status,)
    stall = entry.get("stall", 0)
    if isinstance(stall, bool) or not isinstance(stall, (int, float)) or stall < 0:
        return "stall must be a number of seconds >= 0, got %r" % (stall,)
    for flag in ("drop", "close", "close_after", "chunked", "early"):
        if not isinstance(entry.get(flag, False), bool):
            return "%s must be true or false" % flag
    if not isinstance(entry.get("raw", ""), str):
        return "raw must be a string"
    if not isinstance(entry.get("body", ""), str):
        return "body must be a string"
    try:
        bytes.fromhex(entry.get("body_hex", ""))
    except (TypeError, ValueError):
        return "body_hex must be a string of hex digits"
    if not isinstance(entry.get("content_type", ""), str) or "\n" in entry.get("content_type", ""):
        return "content_type must be a string"
    retry_after = entry.get("retry_after", "")
    if isinstance(retry_after, bool) or not isinstance(retry_after, (str, int, float)):
        return "retry_after must be a string or a number"
    headers = entry.get("headers", {})
    if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
        return "headers must be an object of strings"
    for text in [str(retry_after)] + list(headers) + list(headers.values()):
        if "\r" in text or "\n" in text:
            return "header text must not contain CR or LF"
    return None


def decode_batch(body):
    """Decodes a batch frame: returns (batch metadata or None, records or None, problems)."""
    problems = []
    batch = None
    if len(body) >= 8:
        magic, size = struct.unpack_from("<II", body, 0)
        if magic == SKIPPABLE_MAGIC and size >= META_V1.size and len(body) >= 8 + size:
            tag, version, flags, batch_id, count, dict_id, content_size = \
                META_V1.unpack_from(body, 8)
            batch = {"tag": tag.decode("latin-1"), "version": version, "flags": flags,
                     "batch_id": batch_id, "record_count": count, "dict_id": dict_id,
                     "content_size": content_size, "metadata_size": size}
            if tag != b"CRNB":
                problems.append("metadata tag is %r, not b'CRNB'" % tag)
            if version != 1 or flags != 0:
                problems.append("version %d flags %d, expected 1 and 0" % (version, flags))
        else:
            problems.append("the body does not start with a Cairn metadata frame")
    else:
        problems.append("the body is shorter than a zstd frame header")

    # Like any zstd reader that knows nothing of Cairn: skip skippable frames, decode
    # the rest, across frame boundaries.
    out = bytearray()
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(body), read_across_frames=True)
        while True:
            chunk = reader.read(1 << 16)
            if not chunk:
                break
            out += chunk
            if len(out) > MAX_DECODED:
                return batch, None, problems + [
                    "decoded body exceeds %d bytes; not decoded further" % MAX_DECODED]
    except zstandard.ZstdError as error:
        return batch, None, problems + ["zstd could not decode the body: %s" % error]

    if out and not out.endswith(b"\n"):
        problems.append("the decoded body does not end with a newline")
    lines = bytes(out).split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    records = []
    for line in lines:
        try:
            records.append(line.decode("utf-8"))
        except UnicodeDecodeError:
            problems.append("a record is not valid UTF-8 (kept with replacement characters)")
            records.append(line.decode("utf-8", "replace"))
    if batch is not None:
        if batch["content_size"] != len(out):
            problems.append("decoded %d bytes, metadata says %d"
                            % (len(out), batch["content_size"]))
        if batch["record_count"] != len(records):
            problems.append("decoded %d records, metadata says %d"
                            % (len(records), batch["record_count"]))
    return batch, records, problems


class State:
    """Everything the collector remembers, behind one lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.attempts = []
        self.script = []
        self.default = {"status": 200}
        self.expect = {}
        self.connections = 0
        # Idempotency-Keys answered 2xx: later attempts of them are answered 200 again.
        self.accepted = set()

    def new_connection(self):
        with self.lock:
            self.connections += 1
            return self.connections

    def take_early(self, attempt, length):
        """Records `attempt` (its body unread, `length` bytes announced) and returns its
        response when it is answered early: over the expected maximum, or the next
        scripted response says so. None otherwise (the response stays for `record`)."""
        with self.lock:
            limit = self.expect.get("max_body")
            if limit is not None and length > limit:
                attempt["seq"] = len(self.attempts)
                attempt["response"] = {"status": 413, "early": True, "stall": 2}
                attempt["answered"] = False
                self.attempts.append(attempt)
                return attempt["response"]
            upcoming = self.script[0] if self.script else self.default
            if attempt["idempotency_key"] in self.accepted:
                return None
            if not upcoming.get("early") or "api_key" in self.expect or "path" in self.expect:
                return None
        return self.record(attempt)

    def record(self, attempt):
        """Stores an attempt and returns the response it gets (the next scripted one)."""
        with self.lock:
            attempt["seq"] = len(self.attempts)
            authorization = dict((k.lower(), v) for k, v in attempt["headers"]).get("authorization")
            if "path" in self.expect and attempt["path"] != self.expect["path"]:
                response = {"status": 404}
            elif "api_key" in self.expect and authorization != "Bearer " + self.expect["api_key"]:
                response = {"status": 401}
            elif attempt["idempotency_key"] and attempt["idempotency_key"] in self.accepted:
                response = {"status": 200, "replayed": True}
            else:
                response = self.script.pop(0) if self.script else dict(self.default)
            attempt["response"] = response
            attempt["answered"] = False
            self.attempts.append(attempt)
            return response

    def answered(self, attempt):
        """Notes that `attempt` was answered; a 2xx answer accepts its key."""
        with self.lock:
            attempt["answered"] = True
            status = attempt["response"].get("status", 200)
            if 200 <= status <= 299 and not attempt["response"].get("raw") and attempt["idempotency_key"]:
                self.accepted.add(attempt["idempotency_key"])

    def reset(self):
        with self.lock:
            self.accepted = set()
            self.attempts = []
            self.script = []
            self.default = {"status": 200}
            self.expect = {}

    def snapshot(self):
        with self.lock:
            return json.dumps(self.attempts)

    def events(self):
        with self.lock:
            out = []
            for attempt in self.attempts:
                status = attempt["response"].get("status", 200)
                if attempt["response"].get("drop") or not attempt["answered"]:
                    continue
                if not 200 <= status <= 299 or attempt["records"] is None:
                    continue
                batch_id = attempt["batch"]["batch_id"] if attempt["batch"] else None
                for record in attempt["records"]:
                    out.append({"idempotency_key": attempt["idempotency_key"],
                                "batch_id": batch_id, "record": record})
            return json.dumps(out)


STATE = State()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keep-alive, so tests can see connection reuse
    # Headers and body go out in separate writes; with Nagle's algorithm the body would
    # wait for the client's delayed ACK (about 40 ms per request).
    disable_nagle_algorithm = True

    def version_string(self):
        return "cairn-test-collector/1"

    def setup(self):
        super().setup()
        self.connection_id = STATE.new_connection()
        self.requests_on_connection = 0

    def log_message(self, format, *args):
        pass  # stdout carries only the PORT line; stderr stays quiet unless it matters

    # Routing ---------------------------------------------------------------------

    def do_GET(self):
        self.guard(self.route_get)

    def do_POST(self):
        self.guard(self.route_post)

    do_PUT = do_PATCH = do_DELETE = do_POST

    def guard(self, route):
        """Runs a route; no request, however malformed, takes the server down."""
        try:
            route()
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            self.close_connection = True
        except Exception:  # noqa: BLE001 - the server must survive anything
            traceback.print_exc(file=sys.stderr)
            self.close_connection = True

    def route_get(self):
        if self.path == "/_control/requests":
            self.reply(200, STATE.snapshot().encode())
        elif self.path == "/_control/events":
            self.reply(200, STATE.events().encode())
        else:
            self.reply(404, json.dumps({"error": "not found"}).encode())

    def route_post(self):
        if self.path.startswith("/_control/"):
            self.route_control()
        else:
            self.receive()

    def route_control(self):
        try:
            body = self.read_body()
        except BadRequest as error:
            self.close_connection = True
            self.reply(400, json.dumps({"error": str(error)}).encode())
            return
        if self.path == "/_control/reset":
            STATE.reset()
            self.reply(200, b'{"ok":true}')
            return
        try:
            value = json.loads(body or b"null")
        except ValueError as error:
            self.reply(400, json.dumps({"error": "invalid JSON: %s" % error}).encode())
            return
        if self.path == "/_control/script":
            if isinstance(value, list):
                problem = next(filter(None, map(validate_response, value)), None)
            else:
                problem = "the script must be a JSON list"
            if problem is None:
                with STATE.lock:
                    STATE.script = list(value)
        elif self.path == "/_control/expect":
            if isinstance(value, dict) and set(value) <= {"api_key", "path", "max_body"} \
                    and all(isinstance(v, int) if k == "max_body" else isinstance(v, str)
                            for k, v in value.items()):
                problem = None
                with STATE.lock:
                    STATE.expect = value
            else:
                problem = "expect takes {\"api_key\": str, \"path\": str, \"max_body\": int}"
        elif self.path == "/_control/default":
            problem = validate_response(value)
            if problem is None:
                with STATE.lock:
                    STATE.default = value
        else:
            self.reply(404, json.dumps({"error": "unknown control path"}).encode())
            return
        if problem is None:
            self.reply(200, b'{"ok":true}')
        else:
            self.reply(400, json.dumps({"error": problem}).encode())

    # Data ------------------------------------------------------------------------

    def receive(self):
        self.requests_on_connection += 1
        attempt = {
            "time": time.time(),
            "monotonic": time.monotonic(),
            "client_port": self.client_address[1],
            "connection_id": self.connection_id,
            "request_on_connection": self.requests_on_connection,
            "method": self.command,
            "path": self.path,
            "http_version": self.request_version,
            "headers": [[name, value] for name, value in self.headers.items()],
            "idempotency_key": self.headers.get("Idempotency-Key"),
            "retry_count": self.headers.get("Cairn-Retry-Count"),
            "content_encoding": self.headers.get("Content-Encoding"),
            "body_length": 0,
            "body_sha256": None,
            "body_base64": None,
            "batch": None,
            "records": None,
            "error": None,
        }
        try:
            announced = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            announced = 0
        early = STATE.take_early(attempt, announced)
        if early is not None:
            # Answered before the body is read, as a server refusing a size or a key does.
            attempt["error"] = "answered before the body was read"
            self.close_connection = True
            status = early.get("status", 200)
            self.reply(status, json.dumps({"ok": 200 <= status <= 299}).encode(),
                       list(early.get("headers", {}).items()))
            with STATE.lock:
                attempt["answered"] = True
            time.sleep(float(early.get("stall", 0)))
            return
        try:
            body = self.read_body()
        except BadRequest as error:
            attempt["error"] = "unreadable request: %s" % error
            with STATE.lock:
                attempt["seq"] = len(STATE.attempts)
                attempt["response"] = {"status": 400}
                attempt["answered"] = False
                STATE.attempts.append(attempt)
            self.close_connection = True
            self.reply(400, json.dumps({"error": str(error)}).encode())
            return

        attempt["body_length"] = len(body)
        attempt["body_sha256"] = hashlib.sha256(body).hexdigest()
        if len(body) <= MAX_KEPT_BODY:
            attempt["body_base64"] = base64.b64encode(body).decode("ascii")
        encoding = (attempt["content_encoding"] or "").strip().lower()
        path = self.path.split("?")[0]
        signal_name = next((name for suffix, name in OTLP_SIGNALS.items() if path.endswith(suffix)), None)
        if encoding == "zstd" and not signal_name:
            try:
                batch, records, problems = decode_batch(body)
            except Exception as error:  # noqa: BLE001 - recorded, never fatal
                batch, records, problems = None, None, ["decoder failed: %r" % error]
            attempt["batch"] = batch
            attempt["records"] = records
            attempt["error"] = "; ".join(problems) or None
        attempt["otlp"] = None
        if signal_name:
            attempt["otlp_signal"] = signal_name
            try:
                attempt["otlp"] = decode_otlp(signal_name, self.headers.get("Content-Type"),
                                              attempt["content_encoding"], body)
            except Exception as error:  # noqa: BLE001 - recorded: the test reads it
                attempt["error"] = "OTLP request not decoded: %s: %s" % (type(error).__name__, error)

        response = STATE.record(attempt)
        if response.get("stall"):
            time.sleep(float(response["stall"]))
        if response.get("drop"):
            self.close_connection = True
            return
        if "raw" in response:
            self.close_connection = True
            self.wfile.write(response["raw"].encode("latin-1"))
            self.wfile.flush()
            with STATE.lock:
                attempt["answered"] = True
            return
        if response.get("close"):
            self.close_connection = True
        status = response.get("status", 200)
        text = response.get("body")
        payload = (json.dumps({"ok": 200 <= status <= 299}) if text is None else text).encode()
        if "body_hex" in response:
            payload = bytes.fromhex(response["body_hex"])
        headers = []
        if "content_type" in response:
            headers.append(("Content-Type", response["content_type"]))
        if "retry_after" in response:
            headers.append(("Retry-After", str(response["retry_after"])))
        headers.extend(response.get("headers", {}).items())
        if response.get("chunked"):
            self.reply_chunked(status, payload, headers)
        else:
            self.reply(status, payload, headers)
        if response.get("close_after"):
            self.close_connection = True
        STATE.answered(attempt)

    def read_body(self):
        """The request body, from Content-Length or chunked transfer encoding."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            return self.read_chunked()
        length = self.headers.get("Content-Length")
        if length is None:
            return b""
        try:
            size = int(length)
        except ValueError:
            raise BadRequest("Content-Length %r is not a number" % length)
        if size < 0 or size > MAX_BODY:
            raise BadRequest("Content-Length %d is out of range" % size)
        body = self.rfile.read(size)
        if len(body) != size:
            raise BadRequest("the body ended after %d of %d bytes" % (len(body), size))
        return body

    def read_chunked(self):
        body = bytearray()
        while True:
            line = self.rfile.readline(1024)
            try:
                size = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                raise BadRequest("bad chunk size line %r" % line[:40])
            if size < 0 or len(body) + size > MAX_BODY:
                raise BadRequest("chunked body too large")
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(body)
            chunk = self.rfile.read(size)
            if len(chunk) != size:
                raise BadRequest("a chunk ended early")
            body += chunk
            self.rfile.readline(1024)

    def reply(self, status, payload, headers=()):
        self.send_response(status)
        if not any(name.lower() == "content-type" for name, _ in headers):
            self.send_header("Content-Type", "application/json")
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()


    def reply_chunked(self, status, payload, headers=()):
        """The payload in chunks of up to 7 bytes (sizes in hex, one with an extension),
        then a trailer."""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Transfer-Encoding", "chunked")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        out = bytearray()
        for index, start in enumerate(range(0, len(payload), 7)):
            chunk = payload[start:start + 7]
            extension = ";part=%d" % index if index == 1 else ""
            out += b"%x%s\r\n%s\r\n" % (len(chunk), extension.encode(), chunk)
        out += b"0\r\nX-Trailer: done\r\n\r\n"
        self.wfile.write(bytes(out))
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    daemon_threads = True       # a stalled handler never delays exit
    request_queue_size = 128

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (ssl.SSLError, ConnectionError, socket.timeout)):
            return  # a client that refused our certificate or went away: expected
        print("collector.py: error on a connection from %s:%s" % client_address[:2],
              file=sys.stderr)
        traceback.print_exc(file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ignore-stdin", action="store_true",
                        help="keep serving after stdin closes (stop with SIGTERM)")
    parser.add_argument("--tls", metavar="PEM",
                        help="serve HTTPS with the certificate and key in this PEM file")
    parser.add_argument("--client-ca", metavar="PEM",
                        help="with --tls: require a client certificate signed by this CA")
    args = parser.parse_args()

    server = Server((args.host, args.port), Handler)
    if args.tls:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls)
        if args.client_ca:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(args.client_ca)
        # The handshake then happens in the connection's own thread, on its first
        # read, so a slow or failing client never holds up accept().
        server.socket = context.wrap_socket(server.socket, server_side=True,
                                            do_handshake_on_connect=False)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    def watch_stdin():
        try:
            while sys.stdin.buffer.read(1 << 16):
                pass
        except (OSError, ValueError):
            pass
        stop.set()

    if not args.ignore_stdin:
        threading.Thread(target=watch_stdin, daemon=True).start()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("PORT %d" % server.server_address[1], flush=True)
    while not stop.wait(0.5):
        pass
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
