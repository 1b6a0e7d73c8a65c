#!/usr/bin/env python3
"""A webhook receiver for examples/webhooks.lua to deliver to.

    python3 webhook_receiver.py PORT SECRET

POST /hooks/CUSTOMER checks the signature (HMAC-SHA256 of
"timestamp.body" with SECRET, headers Webhook-Timestamp and
Webhook-Signature: v1=HEX) and answers as that customer's endpoint does:

    acme      200 always
    globex    429 with Retry-After: 1 for every third delivery
    initech   500 the first time it sees an event, 200 after
    umbrella  410 Gone (the endpoint was removed)

It records how many deliveries of each customer were in progress at once
and when each arrived; GET /stats returns that as JSON, POST /quit stops it.
"""
import hashlib
import hmac
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, SECRET = int(sys.argv[1]), sys.argv[2].encode()
lock = threading.Lock()
stats = {"received": {}, "ok": {}, "bad_signature": 0, "max_in_flight": {},
         "arrivals": {}, "events": {}}
in_flight = {}
seen = set()
globex_n = 0


def bump(table, key, n=1):
    table[key] = table.get(key, 0) + n


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: wq.http reuses connections

    def log_message(self, *args):
        pass

    def reply(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        with lock:
            body = json.dumps(stats).encode()
        self.reply(200, body, [("Content-Type", "application/json")])

    def do_POST(self):
        global globex_n
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/quit":
            self.reply(200)
            threading.Thread(target=self.server.shutdown).start()
            return
        customer = self.path.rsplit("/", 1)[-1]
        ts = self.headers.get("Webhook-Timestamp", "")
        want = "v1=" + hmac.new(SECRET, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(want, self.headers.get("Webhook-Signature", "")):
            with lock:
                stats["bad_signature"] += 1
            return self.reply(401, b"bad signature")
        event = json.loads(body)["id"]
        with lock:
            bump(stats["received"], customer)
            bump(in_flight, customer)
            m = stats["max_in_flight"]
            m[customer] = max(m.get(customer, 0), in_flight[customer])
            stats["arrivals"].setdefault(customer, []).append(time.monotonic())
            first_time = event not in seen
            seen.add(event)
            if customer == "globex":
                globex_n += 1
        try:
            time.sleep(0.05)  # the endpoint does some work
            if customer == "umbrella":
                return self.reply(410, b"gone")
            if customer == "globex" and globex_n % 3 == 0:
                return self.reply(429, b"slow down", [("Retry-After", "1")])
            if customer == "initech" and first_time:
                return self.reply(500, b"oops")
            with lock:
                bump(stats["ok"], customer)
                bump(stats["events"], event)
            self.reply(200, b'{"ok":true}', [("Content-Type", "application/json")])
        finally:
            with lock:
                in_flight[customer] -= 1


ThreadingHTTPServer.daemon_threads = True
server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
print("receiver listening on", PORT, flush=True)
server.serve_forever()
