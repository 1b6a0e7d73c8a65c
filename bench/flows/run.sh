#!/usr/bin/env bash
# Flows against the same jobs without a flow (SPEC 9.3), both backends, interleaved:
#
#   bench/flows/run.sh [ROUNDS] [N] [FLOWS] [NODES]      (defaults 3, 100000, 1000, 100)
#
# Each round runs, on a state file (fresh) and on PostgreSQL (a fresh database of the cluster
# scripts/pg.sh starts for the run): N plain jobs, one flow of N parts into one join, and FLOWS
# flows of NODES nodes, one right after the other (bench/flows/flows.lua prints the numbers).
# Then, per backend, the ratios of the same round: fan-in jobs/s / plain jobs/s and fan-in
# add rate / plain add rate (SPEC's bars: >= 85% and >= 50%), the same for the many flows, and
# the join latency (p99, bar 10 ms); each as the range over the rounds and the median.
# WQRUN (default build/wqrun: use a Release build, scripts/bench.sh makes build-bench/wqrun).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-3}
N=${2:-100000}
FLOWS=${3:-1000}
NODES=${4:-100}
WQRUN=${WQRUN:-build/wqrun}
[[ -x $WQRUN ]] || { echo "run.sh: no $WQRUN (bash scripts/build.sh)" >&2; exit 1; }
OUT=$(mktemp -d /tmp/wqrun-bench-flows.XXXXXX)
env=$(bash scripts/pg.sh start) # a cluster of its own, in a directory of its own
eval "$env"
PGDIR=$WQ_PG_DIR
trap 'bash scripts/pg.sh stop "$PGDIR" >/dev/null 2>&1 || true' EXIT

echo "# bench/flows/run.sh: $ROUNDS rounds, N=$N, ${FLOWS}x$NODES, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs"
echo "# wqrun $($WQRUN --version 2>&1 | head -1)"
one() { # backend round mode args...
    local be=$1 r=$2
    shift 2
    local db
    if [[ $be == sqlite ]]; then
        db=$OUT/state.db
        rm -f "$db" "$db-wal" "$db-shm"
    else
        db=$(bash scripts/pg.sh createdb "bf_${r}_$1_$RANDOM")
    fi
    "$WQRUN" --quiet --db "$db" bench/flows/flows.lua "$@" 2>/dev/null | sed "s/^/$be $r /"
}
for r in $(seq "$ROUNDS"); do
    for be in sqlite pg; do
        one "$be" "$r" plain "$N"
        one "$be" "$r" fanin "$N"
        one "$be" "$r" many "$FLOWS" "$NODES"
    done
done | tee "$OUT/raw.txt"

python3 - "$OUT/raw.txt" "$N" "$FLOWS" "$NODES" <<'EOF'
import statistics, sys
raw, n, f, m = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
v = {}
for line in open(raw):
    be, r, name, val = line.split()[:4]
    v[(be, int(r), name)] = float(val)
rounds = sorted({k[1] for k in v})
def show(label, xs, unit):
    xs = [x for x in xs if x is not None]
    if not xs:
        print("%-52s (no data)" % label); return
    print("%-52s median %8.3g %s, range %.3g - %.3g over %d rounds" %
          (label, statistics.median(xs), unit, min(xs), max(xs), len(xs)))
for be in ("sqlite", "pg"):
    g = lambda r, k: v.get((be, r, k))
    def ratio(r, a, b):
        x, y = g(r, a), g(r, b)
        return x / y * 100 if x and y else None
    print("# %s" % be)
    show("%s plain jobs/s" % be, [g(r, "plain_%s_jobs_per_s" % n) for r in rounds], "jobs/s")
    show("%s fan-in jobs/s / plain (bar >= 85%%)" % be,
         [ratio(r, "fanin_%s_jobs_per_s" % n, "plain_%s_jobs_per_s" % n) for r in rounds], "%")
    show("%s fan-in add rate / plain (bar >= 50%%)" % be,
         [ratio(r, "fanin_%s_add_rate" % n, "plain_%s_add_rate" % n) for r in rounds], "%")
    show("%s fan-in join latency (bar <= 10 ms)" % be,
         [g(r, "fanin_%s_join_latency_p99" % n) for r in rounds], "ms")
    k = "many_%sx%s" % (f, m)
    show("%s %s jobs/s / plain (bar >= 85%%)" % (be, k),
         [ratio(r, k + "_jobs_per_s", "plain_%s_jobs_per_s" % n) for r in rounds], "%")
    show("%s %s add rate / plain (bar >= 50%%)" % (be, k),
         [ratio(r, k + "_add_rate", "plain_%s_add_rate" % n) for r in rounds], "%")
    show("%s %s join latency p99 (bar <= 10 ms)" % (be, k),
         [g(r, k + "_join_latency_p99") for r in rounds], "ms")
EOF
echo "# raw numbers: $OUT/raw.txt"
