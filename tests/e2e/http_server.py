#!/usr/bin/env python3
"""The test server for wq.http (tests/e2e/test_wq_http.sh): standard library only.

    python3 http_server.py DIR

Starts, on 127.0.0.1 and ports the kernel picks:
  http    HTTP/1.1 with keep-alive; the endpoints below
  https   the same endpoints over TLS with a self-signed certificate
          (made with the openssl command in DIR)
  never   a socket that listens (backlog 4096) and never accepts: every
          connection completes in the kernel and is never answered
  full    a socket that never accepts with its accept queue full: a
          connection attempt is never answered (SYNs dropped)
and writes {"http": PORT, "https": PORT, "never": PORT, "full": PORT} to DIR/ports.json
once they all listen. Runs until killed.

Endpoints (GET, or any method where it makes sense):
  /echo                 200, JSON {method, path, query, headers (names
                        lower-cased), body, request_line}
  /status/N?h=Name:value&h=...   status N with those headers, body "status N"
                        (none for 204 and 304)
  /redirect/N           302 to /redirect/N-1; /redirect/0 is /echo
  /slow?after=S         answers 200 "slow" after S seconds
  /hang?id=ID           never answers; when the client closes the connection,
                        records ID's closed_after (seconds since the request)
                        and closed_at (Unix time)
  /endless?id=ID        200 with no length, bytes forever until the client
                        closes; records ID's sent (bytes) and closed_after
  /endless-headers?id=ID   200 and header lines forever until the client
                        closes; records ID's sent (lines) and closed_after
  /big?n=N              200 with Content-Length N
  /gzip                 a gzip-encoded JSON body (Content-Encoding: gzip) when
                        the request's Accept-Encoding has gzip, else plain
  /repeat               a header sent twice (X-Twice: a, X-Twice: b)
  /conns                JSON {"http": n, "https": n}: connections accepted so far
  /events?id=ID         JSON of what was recorded for ID ({} while open)
Any request whose target is absolute-form ("GET http://host/path HTTP/1.1",
as a client sends to a proxy) gets 200 and JSON {proxied: true,
request_line, host}.
"""

import gzip
import json
import os
import select
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
CONNS = {"http": 0, "https": 0}
EVENTS = {}


def record(ident, **kw):
    if ident:
        with LOCK:
            EVENTS.setdefault(ident, {}).update(kw)


def peer_closed(sock, limit):
    """Waits until the peer closes sock (or limit seconds pass); True if it did."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        r, _, _ = select.select([sock], [], [], 0.02)
        if r:
            try:
                data = sock.recv(4096, socket.MSG_PEEK)
            except (ConnectionError, OSError):
                return True
            if not data:
                return True
            sock.recv(4096)  # a pipelined request: not ours to answer, drop it
    return False


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: every answer has a length
    scheme = "http"

    def setup(self):
        super().setup()
        with LOCK:
            CONNS[self.scheme] += 1

    def log_message(self, fmt, *args):  # quiet
        pass

    def send(self, status, body, ctype="application/json", headers=()):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        elif isinstance(body, str):
            body = body.encode()
        if status in (204, 304):
            body = b""  # they have none (RFC 9110 6.4.1)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def handle_any(self):
        body = self.read_body()
        if self.path.startswith("http://") or self.path.startswith("https://"):
            u = urllib.parse.urlsplit(self.path)
            return self.send(200, {"proxied": True, "request_line": self.requestline,
                                   "host": u.hostname})
        u = urllib.parse.urlsplit(self.path)
        q = urllib.parse.parse_qs(u.query, keep_blank_values=True)
        ident = (q.get("id") or [""])[0]
        parts = u.path.strip("/").split("/")
        what = parts[0]
        if what == "echo" or (what == "redirect" and parts[1:] == ["0"]):
            return self.send(200, {
                "method": self.command,
                "path": u.path,
                "query": u.query,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body.decode("latin-1"),
                "request_line": self.requestline,
            })
        if what == "status":
            hdrs = [tuple(h.split(":", 1)) for h in q.get("h", [])]
            return self.send(int(parts[1]), "status " + parts[1], "text/plain", hdrs)
        if what == "redirect":
            self.send_response(302)
            self.send_header("Location", "/redirect/%d" % (int(parts[1]) - 1))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        if what == "slow":
            time.sleep(float((q.get("after") or ["1"])[0]))
            return self.send(200, "slow", "text/plain")
        if what == "hang":
            t0 = time.monotonic()
            record(ident, opened=True)
            if peer_closed(self.connection, 300):
                record(ident, closed_after=round(time.monotonic() - t0, 3), closed_at=time.time())
            self.close_connection = True
            return None
        if what == "endless":
            t0 = time.monotonic()
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            chunk = b"x" * 65536
            sent = 0
            try:
                while time.monotonic() - t0 < 300:
                    self.wfile.write(chunk)
                    sent += len(chunk)
                    record(ident, sent=sent)
            except (ConnectionError, OSError):
                pass
            record(ident, sent=sent, closed_after=round(time.monotonic() - t0, 3))
            self.close_connection = True
            return None
        if what == "endless-headers":
            t0 = time.monotonic()
            self.send_response_only(200)
            self.flush_headers()  # the status line, then our lines
            sent = 0
            try:
                while time.monotonic() - t0 < 300:
                    self.wfile.write(b"".join(b"X-H%d: %s\r\n" % (sent + k, b"v" * 100)
                                              for k in range(100)))
                    sent += 100
            except (ConnectionError, OSError):
                pass
            record(ident, sent=sent, closed_after=round(time.monotonic() - t0, 3))
            self.close_connection = True
            return None
        if what == "big":
            return self.send(200, b"y" * int(q["n"][0]), "application/octet-stream")
        if what == "gzip":
            data = json.dumps({"zipped": True, "pad": "z" * 1000}).encode()
            if "gzip" not in self.headers.get("Accept-Encoding", ""):
                return self.send(200, data)
            return self.send(200, gzip.compress(data), "application/json",
                             [("Content-Encoding", "gzip")])
        if what == "repeat":
            return self.send(200, "twice", "text/plain", [("X-Twice", "a"), ("X-Twice", "b")])
        if what == "conns":
            with LOCK:
                return self.send(200, dict(CONNS))
        if what == "events":
            with LOCK:
                return self.send(200, dict(EVENTS.get(ident, {})))
        return self.send(404, "no such endpoint: " + u.path, "text/plain")

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = handle_any


class TLSHandler(Handler):
    scheme = "https"


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def handle_error(self, request, client_address):  # a client that went away: quiet
        pass


def make_cert(d):
    key, crt = os.path.join(d, "key.pem"), os.path.join(d, "cert.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
                    "-out", crt, "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return crt, key


def main():
    d = sys.argv[1]
    plain = Server(("127.0.0.1", 0), Handler)
    tls = Server(("127.0.0.1", 0), TLSHandler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*make_cert(d))
    tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
    never = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    never.bind(("127.0.0.1", 0))
    never.listen(4096)
    # Its accept queue filled by connections of our own: further SYNs are
    # dropped and a client's connect() waits (connect_timeout).
    full = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    fillers = []
    for _ in range(3):
        c = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        c.setblocking(False)
        c.connect_ex(full.getsockname())
        fillers.append(c)
    time.sleep(0.2)
    for s in (plain, tls):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    ports = {"http": plain.server_address[1], "https": tls.server_address[1],
             "never": never.getsockname()[1], "full": full.getsockname()[1]}
    tmp = os.path.join(d, "ports.json.tmp")
    with open(tmp, "w") as f:
        json.dump(ports, f)
    os.rename(tmp, os.path.join(d, "ports.json"))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
