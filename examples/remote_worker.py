#!/usr/bin/env python3
"""remote_worker.py: a remote worker for examples/remote.lua's "thumbs" queue.

For each photo (payload {"w", "h"}) it works out the thumbnail's size (at
most 256x256, aspect kept), renders that thumbnail of a test pattern as a
binary PGM image, and reports {"w", "h", "bytes", "sha256"} as the result.
Uses contrib/python/wqrun_worker.py (standard library only):

    python3 examples/remote_worker.py [URL] [--threads N] [--token T]

URL defaults to http://127.0.0.1:8080. Ctrl-C stops it cleanly (the items
it holds are finished and reported first).
"""
import hashlib
import logging
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "contrib", "python"))
from wqrun_worker import Fail, Retry, Worker  # noqa: E402

BOX = 256


def thumbnail(key, payload, job):
    w, h = (payload or {}).get("w"), (payload or {}).get("h")
    if not w or not h:
        raise Fail("no size for %s: nothing to scale" % key)  # dead at once, never retried
    if w * h > 100_000_000 and job.attempt == 1:
        raise Retry(1, "%dx%d: too big for now" % (w, h))  # failed; the runner retries in 1 s
    scale = min(1.0, BOX / max(w, h))
    tw, th = max(1, round(w * scale)), max(1, round(h * scale))
    rows = bytearray()
    for y in range(th):
        if job.cancelled:  # cancelled (or the lease was lost): stop early
            return None
        rows += bytes(((x * 255 // tw) ^ (y * 255 // th)) & 0xFF for x in range(tw))
    pgm = b"P5 %d %d 255\n" % (tw, th) + bytes(rows)
    time.sleep(0.2)  # a real worker would upload it somewhere
    digest = hashlib.sha256(pgm).hexdigest()
    print("%-12s %5dx%-5d -> %3dx%-3d %6d bytes  sha256 %s  (attempt %d)"
          % (key, w, h, tw, th, len(pgm), digest[:16], job.attempt), flush=True)
    return {"w": tw, "h": th, "bytes": len(pgm), "sha256": digest}


def main():
    args = sys.argv[1:]
    url = args[0] if args and not args[0].startswith("--") else "http://127.0.0.1:8080"
    opt = lambda name, d: args[args.index(name) + 1] if name in args else d  # noqa: E731
    logging.basicConfig(level=logging.INFO, format="worker: %(message)s")
    w = Worker(url, "thumbs", thumbnail, token=opt("--token", os.environ.get("WQRUN_TOKEN")),
               threads=int(opt("--threads", 2)), batch=10, lease=10)
    signal.signal(signal.SIGINT, lambda *_: w.stop())
    signal.signal(signal.SIGTERM, lambda *_: w.stop())
    print("working on thumbs at %s (Ctrl-C to stop)" % url, flush=True)
    w.run()


if __name__ == "__main__":
    main()
