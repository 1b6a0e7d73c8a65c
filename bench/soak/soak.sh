#!/usr/bin/env bash
# The soak (issue 32; a benchmark, not a test: CI does not run it). Runners of
# bench/soak/soak.lua under a steady mixed load for --minutes M (30 by
# default), then a drain:
#
#   WQRUN=build/wqrun bench/soak/soak.sh pg|sqlite [--minutes M] [--out FILE]
#
#   pg      two runners on a throwaway PostgreSQL cluster (scripts/pg.sh);
#           SQL adds: psql wqrun.add_many, 150 items every 0.25 s
#   sqlite  one runner on a state file (--db FILE); SQL adds: sqlite3 into
#           the inbox table, 150 rows every 0.25 s
# Both: HTTP batches of 20 items every 0.5 s (POST /queues/work/items:batch,
# to each runner in turn), `wqrun add` once a second, re-adds of a small key
# space ("plain": dedup and follow-ups), about 1% of keys failing for good
# (dead letters, purged every 5 minutes with `wqrun purge-dead`) and 2%
# failing once (retries), group limits, keep_done, a schedule every minute,
# and the dashboard's routes polled every 2 s.
# Every minute: each runner's RSS (VmRSS). At the end, the verdict lines:
#   plateau   each runner's RSS over the last 10 minutes within 5%
#   errors    log lines at WARN or ERROR but the planned job failures
#   left      rows left once drained: pending items (and, on PostgreSQL,
#             groups' running counts, runners and waiting rows after stop)
# Exit status 1 if one fails. Output also in FILE (default
# bench/soak/last-run-BACKEND.txt).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
: "${WQRUN:?WQRUN must name the wqrun binary (build/wqrun)}"
case $WQRUN in /*) ;; *) WQRUN=$PWD/$WQRUN ;; esac
backend=${1:-}
case $backend in pg | sqlite) shift ;; *) sed -n '2,27p' "$0"; exit 2 ;; esac
minutes=30
out=$here/last-run-$backend.txt
while [ $# -gt 0 ]; do
  case $1 in
  --minutes) minutes=$2; shift 2 ;;
  --out) out=$2; shift 2 ;;
  *) echo "soak.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d /tmp/wqrun-soak.XXXXXX)
pids=()
pg_dir=""
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  [ -n "$pg_dir" ] && bash "$root/scripts/pg.sh" stop "$pg_dir" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
: >"$out"
say() { echo "$*" | tee -a "$out"; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

say "# bench/soak/soak.sh $backend: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $minutes minutes"
say "# $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $("$WQRUN" --version 2>&1 | head -1)"

if [ "$backend" = pg ]; then
  eval "$(bash "$root/scripts/pg.sh" start)" || exit 1
  pg_dir=$WQ_PG_DIR
  db=$(bash "$root/scripts/pg.sh" createdb soak)
  psql_() { "$WQ_PG_BIN/psql" -X -A -t -v ON_ERROR_STOP=1 "$db" -c "$1"; }
  "$WQRUN" migrate --db "$db" >/dev/null || exit 1
  nrunners=2
else
  db=$work/state.db
  psql_() { sqlite3 -cmd ".timeout 10000" "$db" "$1"; }
  nrunners=1
fi
ports=()
for ((i = 1; i <= nrunners; i++)); do
  port=$(free_port)
  ports+=("$port")
  "$WQRUN" --serve --listen "127.0.0.1:$port" --runner-name "r$i" --db "$db" \
    "$here/soak.lua" "r$i" >"$work/r$i.out" 2>"$work/r$i.err" </dev/null &
  pids+=($!)
done
rpids=("${pids[@]}")
for port in "${ports[@]}"; do
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
done
end=$(($(date +%s) + minutes * 60))

# key N: mostly plain keys; ~1% end in x (always fail), ~2% in r (fail once)
keyof() { local n=$1; if ((n % 97 == 0)); then echo "$2$n-x"; elif ((n % 53 == 0)); then echo "$2$n-r"; else echo "$2$n"; fi; }
sql_producer() {
  local i=0 t0 n
  while (($(date +%s) < end)); do
    t0=$(date +%s.%N)
    i=$((i + 1))
    if [ "$backend" = pg ]; then
      psql_ "select wqrun.add_many((select jsonb_agg(jsonb_build_object('queue', 'work',
          'key', 's$i-' || g || case when g % 97 = 0 then '-x' when g % 53 = 0 then '-r' else '' end,
          'group', 'g' || (g % 50), 'payload', jsonb_build_object('n', g)) order by g)
          from generate_series(1, 120) g) || (select jsonb_agg(jsonb_build_object('queue', 'plain',
          'key', 'p' || ((g * 7 + $i) % 400), 'payload', jsonb_build_object('n', g)))
          from generate_series(1, 30) g))" >/dev/null 2>>"$work/sql.err"
    else
      psql_ "insert into inbox(queue, key, payload) select 'work', 's$i-' || value ||
          case when value % 97 = 0 then '-x' when value % 53 = 0 then '-r' else '' end,
          json_object('n', value) from generate_series(1, 120);
        insert into inbox(queue, key, payload) select 'plain', 'p' || ((value * 7 + $i) % 400),
          json_object('n', value) from generate_series(1, 30);" >/dev/null 2>>"$work/sql.err"
    fi
    echo "$?" >>"$work/sql.rc"
    n=$(awk -v t="$t0" -v n="$(date +%s.%N)" 'BEGIN { d = 0.25 - (n - t); print (d > 0 ? d : 0) }')
    sleep "$n"
  done
}
http_producer() {
  local i=0 t0 body k port code
  while (($(date +%s) < end)); do
    t0=$(date +%s.%N)
    i=$((i + 1))
    port=${ports[$((i % ${#ports[@]}))]}
    body="["
    for ((k = 1; k <= 20; k++)); do
      ((k > 1)) && body+=","
      body+="{\"key\":\"$(keyof $((i * 20 + k)) h)\",\"group\":\"g$((k % 50))\",\"payload\":{\"n\":$k}}"
    done
    body+="]"
    code=$(curl -s -o /dev/null -w '%{http_code}' -X POST --data "$body" \
      "http://127.0.0.1:$port/queues/work/items:batch")
    echo "$code" >>"$work/http.codes"
    sleep "$(awk -v t="$t0" -v n="$(date +%s.%N)" 'BEGIN { d = 0.5 - (n - t); print (d > 0 ? d : 0) }')"
  done
}
cli_producer() {
  local i=0
  while (($(date +%s) < end)); do
    i=$((i + 1))
    "$WQRUN" add --db "$db" plain "c$((i % 50))" "{\"n\":$i}" >/dev/null 2>>"$work/cli.err"
    echo "$?" >>"$work/cli.rc"
    sleep 1
  done
}
# an operator: every 5 minutes the dead letters so far are purged (a steady state: without
# it every runner's dead letters pile up in the database, and on SQLite in memory too)
purger() {
  local last=$(date +%s)
  while (($(date +%s) < end)); do
    if (($(date +%s) - last >= 300)); then
      "$WQRUN" purge-dead --db "$db" work >>"$work/purge.out" 2>>"$work/cli.err"
      echo "$?" >>"$work/cli.rc"
      last=$(date +%s)
    fi
    sleep 1
  done
}
poller() {
  local port
  while (($(date +%s) < end)); do
    for port in "${ports[@]}"; do
      for path in / /queues /metrics /queues/work /queues/work/groups /queues/plain \
        "/queues/work/dead?limit=10" "/queues/work/items?limit=10" /queues/tick/schedules; do
        curl -s -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:$port$path" >>"$work/poll.codes"
      done
      [ "$backend" = pg ] && curl -s -o /dev/null "http://127.0.0.1:$port/runners"
    done
    sleep 2
  done
}
sql_producer &
pids+=($!)
http_producer &
pids+=($!)
cli_producer &
pids+=($!)
poller &
pids+=($!)
purger &
pids+=($!)

rss_of() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
say "# minute  $(for ((i = 1; i <= nrunners; i++)); do printf 'r%d_rss_kb  ' "$i"; done)"
for ((m = 1; m <= minutes; m++)); do
  sleep $((end - (minutes - m) * 60 - $(date +%s) > 0 ? end - (minutes - m) * 60 - $(date +%s) : 0))
  line="rss $m"
  for ((i = 0; i < nrunners; i++)); do line+=" $(rss_of "${rpids[$i]}")"; done
  say "$line"
done
wait "${pids[@]:$nrunners}" 2>/dev/null

# the drain
if [ "$backend" = pg ]; then
  pending="select count(*) from wqrun.jobs"
else
  pending="select (select count(*) from items) + (select count(*) from inbox)"
fi
for _ in $(seq 600); do
  [ "$(psql_ "$pending")" = 0 ] && break
  sleep 0.5
done
left_pending=$(psql_ "$pending")
if [ "$backend" = pg ]; then
  say "# done by the runners: $(psql_ "select string_agg(name || ' ' || done, ', ' order by name) from wqrun.runners"); dead letters $(psql_ "select count(*) from wqrun.dead"); the schedule last ran at $(psql_ "select last_at from wqrun.schedules")"
  left_groups=$(psql_ "select coalesce(sum(running), 0) from wqrun.groups")
else
  say "# dead letters $(psql_ "select count(*) from dead")"
  left_groups=0
fi
for p in "${rpids[@]}"; do kill -TERM "$p" 2>/dev/null; done
for p in "${rpids[@]}"; do wait "$p" 2>/dev/null; done
left_rows=0
if [ "$backend" = pg ]; then
  left_rows=$(psql_ "select (select count(*) from wqrun.runners) + (select count(*) from wqrun.waiting) + (select count(*) from wqrun.jobs)")
fi
say "# adds: sql $(grep -c . "$work/sql.rc") calls ($(grep -vc '^0$' "$work/sql.rc") failed), http $(grep -c . "$work/http.codes") batches ($(grep -vc '^202$' "$work/http.codes") not 202), cli $(grep -c . "$work/cli.rc") ($(grep -vc '^0$' "$work/cli.rc") failed); polls $(grep -c . "$work/poll.codes") ($(grep -vc '^200$' "$work/poll.codes") not 200)"

status=0
for ((i = 1; i <= nrunners; i++)); do
  col=$((i + 2))
  read -r lo hi < <(awk -v from=$((minutes > 10 ? minutes - 10 : 1)) -v c=$col \
    '$1 == "rss" && $2 >= from { if (lo == "" || $c < lo) lo = $c; if ($c > hi) hi = $c } END { print lo, hi }' "$out")
  spread=$(awk -v lo="$lo" -v hi="$hi" 'BEGIN { printf "%.1f", (lo > 0 ? (hi - lo) * 100 / lo : 999) }')
  ok=$(awk -v s="$spread" 'BEGIN { print ((s <= 5) ? "met" : "MISSED") }')
  [ "$ok" = met ] || status=1
  say "plateau r$i: RSS over the last 10 minutes $lo-$hi kB, spread $spread% (bar 5%): $ok"
done
errs=$(cat "$work"/r*.err | grep -E ' (WARN|ERROR) ' | grep -v 'soak: planned')
nerr=$(printf '%s' "$errs" | grep -c .)
bad_adds=$(($(grep -vc '^0$' "$work/sql.rc") + $(grep -vc '^202$' "$work/http.codes") + $(grep -vc '^0$' "$work/cli.rc")))
if ((nerr > 0 || bad_adds > 0)); then status=1; fi
say "errors: $nerr log line(s) at WARN/ERROR but the planned failures; $bad_adds add(s) refused"
[ -n "$errs" ] && printf '%s\n' "$errs" | head -5 | sed 's/^/#   /' | tee -a "$out"
cat "$work/sql.err" "$work/cli.err" 2>/dev/null | head -3 | sed 's/^/#   /' | tee -a "$out"
if ((left_pending > 0 || left_groups > 0 || left_rows > 0)); then status=1; fi
say "left: $left_pending pending item(s) after the drain, $left_groups group slot(s) counted, $left_rows runner/waiting/item row(s) after the stop"
exit $status
