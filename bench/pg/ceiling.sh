#!/usr/bin/env bash
# The raw PostgreSQL ceiling for a batched claim + complete, with pgbench:
# N pre-loaded rows (pgbench_schema.sql) drained to empty by C clients,
# 100 rows per batch, prepared statements.
#
#   DATABASE_URL=... bench/pg/ceiling.sh VARIANT CLIENTS N
#
# VARIANT: 2commit  pgbench_claim.sql          claim, commit; delete, commit
#          1commit  pgbench_claim_1commit.sql  delete the previous batch + claim the next, one commit
#          1stmt    pgbench_claim_1stmt.sql    claim and delete in one statement (at most once)
# Prints `pgbench_<variant>_c<C>_rows_per_s <value> rows/s` = N / the time
# pgbench reports (initial connections excluded), and the PostgreSQL server's
# CPU time per row over pgbench's run (pgbench's own CPU not counted).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin=${WQ_PG_BIN:-/usr/lib/postgresql/15/bin}
variant=${1:?usage: ceiling.sh 2commit|1commit|1stmt CLIENTS N}
clients=${2:?clients}
n=${3:?rows}
url=${DATABASE_URL:?DATABASE_URL not set}
db=${url##*/}
db=${db%%\?*}

case $variant in
2commit) script=pgbench_claim.sql extra=0 ;;
1commit) script=pgbench_claim_1commit.sql extra=1 ;;
1stmt) script=pgbench_claim_1stmt.sql extra=0 ;;
*) echo "ceiling.sh: unknown variant $variant" >&2; exit 2 ;;
esac

batches=$(((n + 99) / 100))
per_client=$(((batches + clients - 1) / clients + extra))

PGOPTIONS='-c client_min_messages=warning' "$bin/psql" -qX -v ON_ERROR_STOP=1 -v n="$n" \
  -f "$here/pgbench_schema.sql" "$url"

# server_cpu POSTMASTER: seconds of CPU of the PostgreSQL server so far: the
# postmaster's own and its reaped children's (exited backends), and its live
# children's (backends, walwriter, checkpointer, autovacuum...), from /proc.
server_cpu() {
  local pm=$1
  # Processes come and go while /proc is read: cat's complaints are ignored.
  {
    cat "/proc/$pm/stat"
    cat /proc/[0-9]*/stat 2>/dev/null || true
  } | awk -v pm="$pm" -v hz="$(getconf CLK_TCK)" '{
    sub(/^.*\) /, "")   # drop "pid (comm) ": $1 is then the state, $2 the ppid
    if (NR == 1) t += $12 + $13 + $14 + $15
    else if ($2 == pm) t += $12 + $13
  } END { printf "%.2f\n", t / hz }'
}
# exiting POSTMASTER: true while a backend of this database is still there
# or a child of the postmaster is a zombie. An exited backend's time shows
# nowhere while it is a zombie (not in its own stat, not yet in the
# postmaster's cutime), so the time is read only when this is false.
exiting() {
  pgrep -P "$1" -f "^postgres: [^ ]+ $db " >/dev/null && return 0
  { cat /proc/[0-9]*/stat 2>/dev/null || true; } |
    awk -v pm="$1" '{ sub(/^.*\) /, "") } $1 == "Z" && $2 == pm { z = 1 } END { exit !z }'
}
# settle POSTMASTER: waits until nothing is exiting (10 s at most).
settle() {
  local i
  for ((i = 0; i < 500; i++)); do
    exiting "$1" || return 0
    sleep 0.02
  done
  echo "# ceiling.sh: backends still exiting after 10 s: server CPU may be short" >&2
}
datadir=$("$bin/psql" -qXAt -c "SHOW data_directory" "$url")
pm=$(head -n1 "$datadir/postmaster.pid")

log=$(mktemp)
trap 'rm -f "$log"' EXIT
settle "$pm"
cpu0=$(server_cpu "$pm")
"$bin/pgbench" -n -M prepared -D prev='{}' -D k=0 -D last="$per_client" -f "$here/$script" -c "$clients" -j "$clients" \
  -t "$per_client" "$url" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }

settle "$pm"
cpu1=$(server_cpu "$pm")
left=$("$bin/psql" -qXAt -c "SELECT count(*) FROM claim_q" "$url")
[ "$left" = 0 ] || { echo "ceiling.sh: $left rows left in claim_q" >&2; cat "$log" >&2; exit 1; }

tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p' "$log")
lat=$(sed -n 's/^latency average = \([0-9.]*\) ms$/\1/p' "$log")
[ -n "$tps" ] || { cat "$log" >&2; exit 1; }
txns=$((per_client * clients))
awk -v n="$n" -v tps="$tps" -v t="$txns" -v v="$variant" -v c="$clients" -v lat="$lat" \
  -v cpu="$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { print b - a }')" 'BEGIN {
  printf "# %s, %d clients: %d transactions, %.1f tps, latency average %s ms, server CPU %.2f s\n", v, c, t, tps, lat, cpu
  printf "pgbench_%s_c%d_rows_per_s %.0f rows/s\n", v, c, n * tps / t
  printf "pgbench_%s_c%d_pg_cpu_us_per_row %.1f us/row\n", v, c, cpu / n * 1e6
}'
