#!/usr/bin/env bash
# Remote workers on PostgreSQL (issue 29): one remote Python worker
# (bench/remote_worker.py: claims of 100, batched done reports, one
# connection) against one runner's own burn-down with a no-op Lua handler
# (bench/pg/lua/noop.lua, 500 workers), and the same worker pipelined (its
# reports on a second connection while it claims the next batch) and combined
# (each claim carrying the reports of the batch before: one transaction commits
# those outcomes and claims the next items), combined2 (two such loops on two
# connections of the one worker, threads), each on a
# fresh database of N items
# (wqrun.add_many), interleaved, ROUNDS rounds; then add -> start latency: a
# Lua handler's start against an idle long-polling remote worker's claim,
# alternated (LAT_ROUNDS x LAT_K samples). Needs a cluster (scripts/pg.sh)
# exported; WQRUN (build-bench/wqrun), N (50000), ROUNDS (3).
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${N:-50000}
rounds=${ROUNDS:-3}
. bench/lib/release.sh
if [[ -z ${WQRUN:-} ]]; then
  release_build pg_remote wqrun
  WQRUN=build-bench/wqrun
fi
: "${WQ_TEST_PG_URL:?start a cluster: eval \"\$(scripts/pg.sh start)\"}"
. bench/pg/lib.sh
tmp=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
cat >"$tmp/remote.lua" <<'LUA'
wq.queue("noop", {max_retries = 1})
LUA
port=$((20000 + RANDOM % 20000))
up() { for _ in $(seq 1 100); do curl -s -m 1 "http://127.0.0.1:$port/healthz" >/dev/null && return; sleep 0.1; done; }
left() { psql -c "select count(*) from wqrun.jobs"; }
echo "# pg remote: $n no-op items, one runner (Lua handler) vs one remote Python worker, $rounds rounds"
echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S +0000'), machine: nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  for mode in lua remote pipelined combined combined2; do
    db="bench_remote_${mode}_${r}_$$"
    DATABASE_URL=$(bash scripts/pg.sh createdb "$db")
    export DATABASE_URL
    load_items noop "$n"
    port=$((port + 1))
    t0=$(now)
    if [[ $mode == lua ]]; then
      "$WQRUN" --quiet --serve --listen "127.0.0.1:$port" --db "$DATABASE_URL" bench/pg/lua/noop.lua &
      pids+=($!)
      while [[ $(left) != 0 ]]; do sleep 0.05; done
    else
      "$WQRUN" --quiet --serve --listen "127.0.0.1:$port" --db "$DATABASE_URL" "$tmp/remote.lua" &
      pids+=($!)
      up
      python3 bench/remote_worker.py 127.0.0.1 "$port" noop "$n" 100 \
        $([[ $mode != remote ]] && echo "$mode") >"$tmp/w.out"
      while [[ $(left) != 0 ]]; do sleep 0.05; done
    fi
    took=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }')
    echo "round $r $mode: $n jobs in $took s: $(awk -v n="$n" -v t="$took" 'BEGIN { printf "%.0f", n / t }') jobs/s (from the runner's start)"
    kill -TERM "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
  done
done
# add -> start: a Lua handler's start (bench/pg/lua/latency.lua, queue "lat") against an
# idle long-polling remote worker's claim answer, each add through HTTP; LAT_ROUNDS
# alternations of LAT_K samples, each runner on a database of its own.
lat_rounds=${LAT_ROUNDS:-3}
lat_k=${LAT_K:-200}
cat >"$tmp/remote_lat.lua" <<'LUA'
wq.queue("lat", {max_retries = 1})
LUA
for r in $(seq "$lat_rounds"); do
  for mode in lua remote; do
    DATABASE_URL=$(bash scripts/pg.sh createdb "bench_remote_lat_${mode}_${r}_$$")
    export DATABASE_URL
    "$WQRUN" migrate --db "$DATABASE_URL" >/dev/null
    port=$((port + 1))
    if [[ $mode == lua ]]; then
      : >"$tmp/starts"
      "$WQRUN" --quiet --serve --listen "127.0.0.1:$port" --db "$DATABASE_URL" bench/pg/lua/latency.lua >"$tmp/starts" &
      pids+=($!)
      up
      echo "round $r add -> start, Lua handler: $(python3 bench/remote_worker.py 127.0.0.1 "$port" lat lua_latency "$lat_k" "$tmp/starts")"
    else
      "$WQRUN" --quiet --serve --listen "127.0.0.1:$port" --db "$DATABASE_URL" "$tmp/remote_lat.lua" &
      pids+=($!)
      up
      echo "round $r add -> claim, remote worker: $(python3 bench/remote_worker.py 127.0.0.1 "$port" lat latency "$lat_k")"
    fi
    kill -TERM "${pids[-1]}"; wait "${pids[-1]}" 2>/dev/null || true
  done
done
