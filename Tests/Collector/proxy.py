#!/usr/bin/env python3
"""A small forward proxy for Cairn's transport tests; it records what it was asked.

Usage: proxy.py [--host 127.0.0.1] [--port 0]

The first line on stdout is `PORT <n>`; nothing else is written there. It serves until
stdin reaches end of file, or until SIGTERM or SIGINT.

  - `CONNECT host:port`: connects to the target (loopback only), answers
    `200 Connection established`, and relays bytes both ways until either side closes.
  - An absolute-form request (`POST http://host:port/path HTTP/1.1`): forwarded to the
    target (loopback only) in origin form with `Connection: close`; the target's
    answer is relayed, then the client connection is closed.
  - `GET /_proxy/seen` (origin form): a JSON list of what was asked, oldest first:
    {"method": "CONNECT" or the method, "target": the request target as sent,
     "headers": [[name, value], ...]}.
"""
import argparse
import json
import select
import signal
import socket
import sys
import threading

SEEN = []
LOCK = threading.Lock()
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def read_head(sock):
    """Reads up to the blank line; returns (request line, headers, bytes after)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return None, None, b""
        data += chunk
        if len(data) > 1 << 20:
            return None, None, b""
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.append([name.strip(), value.strip()])
    return lines[0], headers, rest


def split_host_port(authority, default_port):
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = authority.partition(":")
    return host, int(port) if port else default_port


def relay(a, b):
    sockets = [a, b]
    while True:
        readable, _, _ = select.select(sockets, [], [], 60)
        if not readable:
            return
        for source in readable:
            data = source.recv(65536)
            if not data:
                return
            (b if source is a else a).sendall(data)


def handle(client):
    try:
        line, headers, rest = read_head(client)
        if line is None:
            return
        method, target, _version = line.split(" ", 2)
        if method == "GET" and target == "/_proxy/seen":
            with LOCK:
                body = json.dumps(SEEN).encode()
            client.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n"
                           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            return
        with LOCK:
            SEEN.append({"method": method, "target": target, "headers": headers})
        if method == "CONNECT":
            host, port = split_host_port(target, 443)
            if host not in LOOPBACK:
                client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            upstream = socket.create_connection((host, port), timeout=30)
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if rest:
                upstream.sendall(rest)
            relay(client, upstream)
            upstream.close()
            return
        if not target.lower().startswith("http://"):
            client.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            return
        authority, slash, path = target[7:].partition("/")
        host, port = split_host_port(authority, 80)
        if host not in LOOPBACK:
            client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            return
        length = 0
        for name, value in headers:
            if name.lower() == "content-length":
                length = int(value)
        body = rest
        while len(body) < length:
            chunk = client.recv(65536)
            if not chunk:
                return
            body += chunk
        kept = [(n, v) for n, v in headers
                if n.lower() not in ("connection", "proxy-authorization", "proxy-connection")]
        head = "%s /%s HTTP/1.1\r\n" % (method, path) + "".join(
            "%s: %s\r\n" % (n, v) for n, v in kept) + "Connection: close\r\n\r\n"
        upstream = socket.create_connection((host, port), timeout=30)
        upstream.sendall(head.encode("latin-1") + body[:length])
        while True:
            data = upstream.recv(65536)
            if not data:
                break
            client.sendall(data)
        upstream.close()
    except (OSError, ValueError):
        pass
    finally:
        client.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = socket.create_server((args.host, args.port))
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

    def serve():
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(client,), daemon=True).start()

    threading.Thread(target=watch_stdin, daemon=True).start()
    threading.Thread(target=serve, daemon=True).start()
    print("PORT %d" % server.getsockname()[1], flush=True)
    while not stop.wait(0.5):
        pass
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
