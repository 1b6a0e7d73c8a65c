#!/usr/bin/env bash
# Live events (issue 28): the cost of GET /events streams on the jobs they
# tell of. N no-op jobs (in memory, 8 workers) with no stream open, against
# the same with CLIENTS streams open, one of which never reads; interleaved
# rounds in one run, medians and per-round ratios. Two kinds of streams:
#   all    every client follows every event (GET /events): each job's added,
#          started and done reach every client;
#   other  every client follows another queue (GET /events?queue=other), as a
#          dashboard open on another queue's page does.
# Prints `<name> <value> <unit>` lines. Environment: WQRUN (default
# build-bench/wqrun, Release), N (100000), CLIENTS (100), ROUNDS (5).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${N:-100000}
clients=${CLIENTS:-100}
rounds=${ROUNDS:-5}
. bench/lib/release.sh
if [[ -z ${WQRUN:-} ]]; then
  release_build bench_events wqrun
  WQRUN=build-bench/wqrun
fi
tmp=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

echo "# bench_events: $n no-op jobs, $clients event streams (one never reads), $rounds rounds"
echo "# date: $(date -u '+%Y-%m-%d %H:%M:%S +0000')"
echo "# machine: nproc $(nproc), load $(cut -d' ' -f1-3 /proc/loadavg), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"

# one_run MODE: prints jobs/s (MODE none, all or other)
one_run() {
  local mode=$1 port rate
  port=$((20000 + RANDOM % 20000))
  rm -f "$tmp/go"
  "$WQRUN" --quiet --listen "127.0.0.1:$port" bench/events.lua "$n" "$tmp/go" >"$tmp/out" 2>"$tmp/err" &
  local runner=$!
  for _ in $(seq 1 100); do curl -s -m 1 "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.05; done
  local readers=()
  if [[ $mode != none ]]; then
    local path=/events
    [[ $mode == other ]] && path="/events?queue=other"
    for ((i = 1; i < clients; i++)); do
      curl -sN "http://127.0.0.1:$port$path" >/dev/null 2>&1 &
      readers+=($!)
    done
    python3 -c '
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % sys.argv[2]).encode())
time.sleep(600)' "$port" "$path" &
    readers+=($!)
    # every stream is open (established connections to the runner's port)
    for _ in $(seq 1 200); do
      c=$(ss -tnH state established "( sport = :$port )" | wc -l)
      [[ $c -ge $clients ]] && break
      sleep 0.05
    done
    sleep 0.2 # their requests are in
  fi
  touch "$tmp/go"
  wait "$runner" || true
  kill "${readers[@]}" 2>/dev/null || true
  wait "${readers[@]}" 2>/dev/null || true
  rate=$(awk '$1 == "events_jobs" { print $2 }' "$tmp/out")
  echo "${rate:-0}"
}

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

: >"$tmp/none"; : >"$tmp/all"; : >"$tmp/other"
for ((r = 1; r <= rounds; r++)); do
  a=$(one_run none); b=$(one_run all); c=$(one_run other)
  echo "#   round $r: none $a, all $b ($(awk -v x="$b" -v y="$a" 'BEGIN { printf "%.2f", x / y }')), other $c ($(awk -v x="$c" -v y="$a" 'BEGIN { printf "%.2f", x / y }')) jobs/s"
  echo "$a" >>"$tmp/none"; echo "$b" >>"$tmp/all"; echo "$c" >>"$tmp/other"
done
none=$(median <"$tmp/none"); all=$(median <"$tmp/all"); other=$(median <"$tmp/other")
echo "events_none $none jobs/s"
echo "events_all_${clients} $all jobs/s"
echo "events_other_${clients} $other jobs/s"
echo "events_all_ratio $(awk -v x="$all" -v y="$none" 'BEGIN { printf "%.3f", x / y }') (bar >= 0.90)"
echo "events_other_ratio $(awk -v x="$other" -v y="$none" 'BEGIN { printf "%.3f", x / y }') (bar >= 0.90)"
