#!/usr/bin/env python3
"""A remote worker for bench_remote.sh (standard library only): one HTTP
connection, claims of up to BATCH, no-op jobs, batched done reports.
Usage: remote_worker.py HOST PORT QUEUE N BATCH [pipelined|combined] -> prints jobs/s for N
jobs (pipelined: the reports on a second connection while the next claim is made;
combined: each claim carries the reports of the batch before, {"done": [...]}).
Or: remote_worker.py HOST PORT QUEUE latency K -> p50/p90/p99 ms of add -> claim
answer at an idle long-polling worker (K samples).
Or: remote_worker.py HOST PORT QUEUE lua_latency K LOG -> the same for a Lua handler's
start: each add through HTTP as above, its start read from LOG, where the runner's
handler writes "KEY UNIX-TIME" as it starts (bench/pg/lua/latency.lua)."""
import http.client
import json
import sys
import threading
import time

host, port, queue = sys.argv[1], int(sys.argv[2]), sys.argv[3]
conn = http.client.HTTPConnection(host, port, timeout=120)


def post(c, path, body):
    c.request("POST", "/queues/%s%s" % (queue, path), json.dumps(body),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    if r.status != 200:
        raise SystemExit("%s: %d %s" % (path, r.status, data[:200]))
    return json.loads(data)


if sys.argv[4] == "latency":
    k = int(sys.argv[5])
    adder = http.client.HTTPConnection(host, port, timeout=30)
    lat = []
    for i in range(k):
        got = {}

        def add_later(i=i):
            time.sleep(0.005)
            got["t0"] = time.perf_counter()
            adder.request("POST", "/queues/%s/items" % queue, json.dumps({"key": "lat%d" % i}))
            adder.getresponse().read()

        t = threading.Thread(target=add_later)
        t.start()
        items = post(conn, "/claim", {"max": 1, "wait": 10})
        t1 = time.perf_counter()
        t.join()
        lat.append((t1 - got["t0"]) * 1000)
        post(conn, "/done", [{"key": it["key"], "token": it["token"]} for it in items])
    lat.sort()
    print("latency_ms p50 %.3f p90 %.3f p99 %.3f" % (lat[len(lat) // 2], lat[len(lat) * 9 // 10],
                                                     lat[min(len(lat) - 1, len(lat) * 99 // 100)]))
    sys.exit(0)

def percentiles(lat):
    lat.sort()
    return "latency_ms p50 %.3f p90 %.3f p99 %.3f" % (
        lat[len(lat) // 2], lat[len(lat) * 9 // 10], lat[min(len(lat) - 1, len(lat) * 99 // 100)])


if sys.argv[4] == "lua_latency":
    k, log = int(sys.argv[5]), sys.argv[6]
    lat = []
    with open(log) as f:
        f.read()  # what an earlier run wrote
        for i in range(k):
            time.sleep(0.005)
            key = "lua%d_%d" % (i, time.time_ns())
            t0 = time.time()
            conn.request("POST", "/queues/%s/items" % queue, json.dumps({"key": key}))
            conn.getresponse().read()
            started, buf = None, ""
            deadline = time.time() + 10
            while started is None and time.time() < deadline:
                buf += f.read()
                for line in buf.splitlines():
                    if line.startswith(key + " "):
                        started = float(line.split()[1])
                if started is None:
                    time.sleep(0.0002)
            if started is None:
                raise SystemExit("lua_latency: %s did not start within 10 s" % key)
            lat.append((started - t0) * 1000)
    print(percentiles(lat))
    sys.exit(0)

n, batch = int(sys.argv[4]), int(sys.argv[5])
mode = sys.argv[6] if len(sys.argv) > 6 else "plain"
done = 0
t0 = time.perf_counter()
if mode in ("combined", "combined2"):
    # each claim carries the reports of the batch before; combined2: two such loops on two
    # connections (threads), so that one's transaction overlaps the other's work
    lock = threading.Lock()
    counts = {"done": 0}

    def combined_loop(c):
        prev = []
        while True:
            with lock:
                counts["done"] += len(prev)
                finished = counts["done"] >= n  # the final reports: nothing more to wait for
            body = {"max": batch, "wait": 0 if finished else 0.05, "lease": 60, "done": prev}
            ans = post(c, "/claim", body)
            bad = [r for r in ans["results"] if "ok" not in r]
            if bad:
                raise SystemExit("combined: a report failed: %s" % bad[0])
            items = ans["items"]
            prev = [{"key": it["key"], "token": it["token"]} for it in items]
            if not items and finished:
                return

    loops = [conn] if mode == "combined" else [conn, http.client.HTTPConnection(host, port, timeout=120)]
    threads = [threading.Thread(target=combined_loop, args=(c,)) for c in loops]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    done = counts["done"]
elif mode == "plain":  # claim, run, report, one after the other
    while done < n:
        items = post(conn, "/claim", {"max": batch, "wait": 5, "lease": 60})
        if not items:
            break
        post(conn, "/done", [{"key": it["key"], "token": it["token"]} for it in items])
        done += len(items)
else:  # the reports go on a second connection, from a thread, while the next claim is made
    import queue as queue_mod
    reports = queue_mod.Queue(maxsize=2)
    rconn = http.client.HTTPConnection(host, port, timeout=120)

    def reporter():
        while True:
            body = reports.get()
            if body is None:
                return
            post(rconn, "/done", body)

    th = threading.Thread(target=reporter)
    th.start()
    while done < n:
        items = post(conn, "/claim", {"max": batch, "wait": 5, "lease": 60})
        if not items:
            break
        reports.put([{"key": it["key"], "token": it["token"]} for it in items])
        done += len(items)
    reports.put(None)
    th.join()
took = time.perf_counter() - t0
print("jobs %d seconds %.3f jobs_per_s %.0f" % (done, took, done / took))
