#!/usr/bin/env bash
# Waiting for a result on PostgreSQL (issue 28): GET items/KEY?wait= on
# runner A, one add at a time, for a key run by A itself (same) or by
# runner B (cross: the end is relayed through the database's notifications).
# Per sample: add->answer, add->start (the run's started_at, the claim) and
# the handler's time (HANDLER_MS); the overhead of waiting is add->answer
# minus (add->start + handler), p50/p90/p99 (bar: p50 <= 2 ms). Needs a
# cluster (scripts/pg.sh) exported; WQRUN (build-bench/wqrun), N (200).
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${N:-200}
export HANDLER_MS=${HANDLER_MS:-10}
. bench/lib/release.sh
if [[ -z ${WQRUN:-} ]]; then
  release_build wait_latency wqrun
  WQRUN=build-bench/wqrun
fi
: "${WQ_TEST_PG_URL:?start a cluster: eval \"\$(scripts/pg.sh start)\"}"
db="bench_wait_$$"
url=$(bash scripts/pg.sh createdb "$db")
tmp=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
pa=$((20000 + RANDOM % 20000))
WHO=A "$WQRUN" --quiet --serve --runner-name A --listen "127.0.0.1:$pa" --db "$url" bench/pg/lua/waited.lua &
pids+=($!)
WHO=B "$WQRUN" --quiet --serve --runner-name B --db "$url" bench/pg/lua/waited.lua &
pids+=($!)
for _ in $(seq 1 100); do curl -s -m 1 "http://127.0.0.1:$pa/healthz" >/dev/null && break; sleep 0.1; done
sleep 1
echo "# wait_latency: $n sequential add + GET ?wait= on runner A, handler ${HANDLER_MS} ms"
echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S +0000'), machine: nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$pa" "$n" "$HANDLER_MS" <<'PY'
import http.client, json, sys, time
port, n, handler = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]) / 1000
c = http.client.HTTPConnection("127.0.0.1", port)
def req(method, path, body=None):
    c.request(method, path, body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, r.read()
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]
for mode in ("same", "cross"):
    total, over = [], []
    for i in range(n + 10):
        key = "%s-%d" % (mode, i)
        q = "on_a" if mode == "same" else "on_b"
        t0 = time.time()
        st, _ = req("POST", "/queues/%s/items" % q, json.dumps({"key": key}))
        st, body = req("GET", "/queues/%s/items/%s?wait=10" % (q, key))
        t1 = time.time()
        run = json.loads(body)
        if run.get("state") != "done":
            print("# %s: not done: %s" % (key, body.decode()[:200]))
            continue
        if i < 10:
            continue  # warm-up
        total.append((t1 - t0) * 1000)
        over.append((t1 - run["started_at"] - handler) * 1000)
    print("wait_%s_add_to_result_p50 %.2f ms (p90 %.2f, p99 %.2f)" % (mode, pct(total, .5), pct(total, .9), pct(total, .99)))
    print("wait_%s_overhead_p50 %.2f ms (p90 %.2f, p99 %.2f; add->result - (add->start + handler), bar p50 <= 2 ms)"
          % (mode, pct(over, .5), pct(over, .9), pct(over, .99)))
PY
