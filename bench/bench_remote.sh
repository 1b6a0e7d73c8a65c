#!/usr/bin/env bash
# Remote workers over HTTP (SPEC 10.2, issue 29): one Python worker
# (bench/remote_worker.py: claims of 100, batched done reports, one
# connection) burning down 100,000 no-op items of a runner with --db
# (SQLite, synchronous = normal), 3 rounds; then add -> claim latency at an
# idle long-polling worker (300 samples). Release build (build-bench/).
# Usage: bench/bench_remote.sh [N] [ROUNDS]
set -eu
cd "$(dirname "$0")/.."
. bench/lib/release.sh
release_build bench_remote wqrun
N=${1:-100000}
ROUNDS=${2:-3}
WQRUN=build-bench/wqrun
T=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
cat >"$T/jobs.lua" <<'LUA'
wq.queue("r", {max_retries = 1})
LUA
port=$((20000 + RANDOM % 20000))
for r in $(seq "$ROUNDS"); do
  rm -f "$T"/s.db*
  "$WQRUN" --quiet --serve --listen "127.0.0.1:$port" --db "$T/s.db" "$T/jobs.lua" &
  pid=$!
  for _ in $(seq 100); do curl -s "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.05; done
  python3 - "$port" "$N" <<'PY'
import json, sys, urllib.request
port, n = int(sys.argv[1]), int(sys.argv[2])
for b in range(0, n, 10000):
    items = [{"key": "k%d" % i} for i in range(b, min(n, b + 10000))]
    urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:%d/queues/r/items:batch" % port,
                           json.dumps(items).encode(), method="POST")).read()
PY
  rss0=$(awk '/VmRSS/ { print $2 }' /proc/$pid/status)
  echo "round $r: $(python3 bench/remote_worker.py 127.0.0.1 "$port" r "$N" 100) runner_rss_kib $rss0"
  kill -TERM "$pid"; wait "$pid" || true
  port=$((port + 1))
done
rm -f "$T"/s.db*
"$WQRUN" --quiet --serve --listen "127.0.0.1:$port" --db "$T/s.db" "$T/jobs.lua" &
pid=$!
for _ in $(seq 100); do curl -s "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.05; done
echo "$(python3 bench/remote_worker.py 127.0.0.1 "$port" r latency 300)"
kill -TERM "$pid"; wait "$pid" || true
