#!/usr/bin/env python3
"""A wqrun pool worker in Python (docs/workers.md): one JSON request per
line on stdin, one JSON reply per line on stdout, stderr for logging.

As a queue's handler it gets {"queue", "key", "payload", "attempt"} and
answers {"result": ...} or {"error": "...", "retry_in": s, "permanent": true}.
This one counts the words of payload.text and hashes it; a payload with
"fail_until": n fails until its n-th attempt (to show retries), one with
"bad": true is refused for good. examples/pool.lua runs it.
"""
import hashlib
import json
import sys


def handle(job):
    p = job.get("payload") or {}
    if p.get("bad"):
        return {"error": "refused: marked bad", "permanent": True}
    if job.get("attempt", 1) < p.get("fail_until", 0):
        return {"error": "not yet (attempt %d)" % job["attempt"], "retry_in": 0.05}
    text = p.get("text", "")
    return {"result": {"words": len(text.split()),
                       "sha256": hashlib.sha256(text.encode()).hexdigest()[:16],
                       "worker": "python"}}


def main():
    for line in sys.stdin:  # ends when wqrun closes the pipe
        try:
            reply = handle(json.loads(line))
        except Exception as e:  # a bug here is the job's failure, not the process's
            reply = {"error": "%s: %s" % (type(e).__name__, e)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()  # one line per request, now: wqrun waits for it


if __name__ == "__main__":
    main()
