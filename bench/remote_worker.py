#!/usr/bin/env python3
"""A remote worker for bench_remote.sh (standard library only): one HTTP
connection, claims of up to BATCH, no-op jobs, batched done reports.
Usage: remote_worker.py HOST PORT QUEUE N BATCH [pipelined] -> prints jobs/s for N jobs
(pipelined: the reports on a second connection while the next claim is made).
Or: remote_worker.py HOST PORT QUEUE latency K -> p50/p90/p99 ms of add -> claim
answer at an idle long-polling worker (K samples)."""
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

n, batch = int(sys.argv[4]), int(sys.argv[5])
pipelined = len(sys.argv) > 6 and sys.argv[6] == "pipelined"
done = 0
t0 = time.perf_counter()
if not pipelined:  # claim, run, report, one after the other
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
