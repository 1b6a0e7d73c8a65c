#!/usr/bin/env python3
# A pool worker for the tests (tests/lua/test_pool*.lua): one JSON request
# per stdin line, one JSON reply per stdout line. What it does is in the
# request: {"op": ...} for pool:call, the payload's "op" for a queue's jobs.
import json
import os
import subprocess
import sys

served = 0
for line in sys.stdin:
    req = json.loads(line)
    served += 1
    if "queue" in req:  # a job: {"queue", "key", "payload", "attempt"}
        p = req.get("payload") or {}
        op = p.get("op", "ok")
        if op == "ok":
            out = {"result": {"key": req["key"], "attempt": req["attempt"],
                              "queue": req["queue"], "payload": p}}
        elif op == "error":
            out = {"error": "boom " + req["key"]}
        elif op == "retry":
            out = {"error": "later", "retry_in": p.get("s", 0.05)}
        elif op == "permanent":
            out = {"error": "never", "permanent": True}
        elif op == "flaky":  # fails until the given attempt
            if req["attempt"] < p["until"]:
                out = {"error": "flaky %d" % req["attempt"]}
            else:
                out = {"result": req["attempt"]}
        elif op == "neither":
            out = {"nothing": 1}
        elif op == "log":
            print("hello from " + req["key"], file=sys.stderr, flush=True)
            out = {"result": None}
        elif op == "sleep_first" and req["attempt"] > 1:  # later attempts: at once
            out = {"result": {"attempt": req["attempt"]}}
        elif op in ("sleep", "sleep_first"):
            with open(p["pidfile"], "w") as f:
                f.write(str(os.getpid()))
            import time
            time.sleep(p["s"])
            out = {"result": "slept"}
        else:
            out = {"error": "unknown op " + op}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
        continue
    op = req.get("op")
    if op == "echo":
        out = {"echo": req.get("v"), "pid": os.getpid(), "served": served}
    elif op == "pid":
        out = {"pid": os.getpid()}
    elif op == "exit":
        sys.exit(req.get("status", 0))
    elif op == "bad":
        sys.stdout.write("this is not json\n")
        sys.stdout.flush()
        continue
    elif op == "long":
        sys.stdout.write('"' + "x" * (req["n"]) + '"\n')
        sys.stdout.flush()
        continue
    elif op == "two":
        sys.stdout.write('{"a":1}\n{"b":2}\n')
        sys.stdout.flush()
        continue
    elif op == "hang":  # sleeps, with a grandchild sleeping too
        child = subprocess.Popen(["sleep", "300"])
        with open(req["pidfile"], "w") as f:
            f.write("%d %d" % (os.getpid(), child.pid))
        import time
        time.sleep(300)
        out = {}
    elif op == "stderr":
        print(req["msg"], file=sys.stderr, flush=True)
        out = {"ok": True}
    elif op == "slow":
        import time
        if "pidfile" in req:
            with open(req["pidfile"], "w") as f:
                f.write(str(os.getpid()))
        time.sleep(req["s"])
        out = {"pid": os.getpid()}
    else:
        out = {"error": "unknown op"}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
