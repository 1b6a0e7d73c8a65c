#!/usr/bin/env bash
# Crash test for acknowledged means durable (issues 4 and 9): producers feed
# the runner while it is killed with SIGKILL at random moments and
# restarted, many times:
#   - the inbox, with batches of rows inserted by the sqlite3 shell
#     (acknowledged: the shell's COMMIT succeeded),
#   - `wqrun add` (acknowledged: exit status 0),
#   - HTTP, two clients posting on keep-alive connections
#     (acknowledged: 202).
# At the end every acknowledged key must have run at least once, nothing may
# be left pending, and re-runs must stay within what was in flight at each
# kill (keys that ran but whose completion was not yet committed, measured
# after each kill).
# With --keep-done the queue remembers finished keys (keep_done); once every
# key has run, the producer feeds them all again while the runner is killed
# again: none may run a second time (their done rows committed with their
# completion).
#   scripts/crash-test.sh [--short] [--keep-done] [--sync normal|full] [--kills K]
# --short is the CI size (30 kills); the default is 100 kills.
set -euo pipefail
cd "$(dirname "$0")/.."
WQRUN=${WQRUN:-build/wqrun}
KILLS=100
MODE=plain
SYNC=normal
usage() {
  echo "usage: $0 [--short] [--keep-done] [--sync normal|full] [--kills K]" >&2
  exit 2
}
while (($#)); do
  case "$1" in
    --short) KILLS=30; shift ;;
    --keep-done) MODE=keep_done; shift ;;
    --sync) [[ ${2:-} == normal || ${2:-} == full ]] || usage; SYNC=$2; shift 2 ;;
    --kills) [[ ${2:-} =~ ^[0-9]+$ ]] || usage; KILLS=$2; shift 2 ;;
    *) usage ;;
  esac
done
[[ -x "$WQRUN" ]] || { echo "crash-test: $WQRUN not built (scripts/build.sh)" >&2; exit 2; }
command -v sqlite3 >/dev/null || { echo "crash-test: needs the sqlite3 shell" >&2; exit 2; }
command -v curl >/dev/null || { echo "crash-test: needs curl" >&2; exit 2; }

dir=$(mktemp -d)
runner=""
producers=()
cleanup() {
  [[ -n "$runner" ]] && kill -9 "$runner" 2>/dev/null || true
  for p in "${producers[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
db=$dir/state.db
log=$dir/ran.log
: >"$log"
"$WQRUN" add --db "$db" crash warmup >/dev/null
echo warmup >"$dir/acked.add"
echo $((20000 + (RANDOM * 32768 + RANDOM) % 40000)) >"$dir/port"

# Producers run until $dir/stop exists (or, given a list, until it is fed);
# each appends the keys it got acknowledged to $dir/acked.SOURCE.

# The inbox: batches of rows straight into the inbox with the sqlite3
# shell, and every tenth batch through `wqrun add`, as users would.
# produce_inbox [LIST]: new keys k1, k2 ..., or the keys of LIST once.
produce_inbox() {
  local i=0 n=0 batch keys=() k
  [[ -n ${1:-} ]] && mapfile -t keys <"$1"
  while [[ ! -e $dir/stop ]]; do
    if ((${#keys[@]})); then
      ((i < ${#keys[@]})) || break
    fi
    n=$((n + 1))
    if ((n % 10 == 0)); then
      for ((j = 0; j < 5; j++, i++)); do
        ((${#keys[@]} == 0 || i < ${#keys[@]})) || break
        k=${keys[i]:-k$((i + 1))}
        if "$WQRUN" add --db "$db" crash "$k" "{\"n\":$i}" >/dev/null 2>>"$dir/producer.err"; then
          echo "$k" >>"$dir/acked.add"
        fi
      done
      continue
    fi
    batch=".timeout 10000
BEGIN;"
    local got=()
    for ((j = 0; j < 10; j++, i++)); do
      ((${#keys[@]} == 0 || i < ${#keys[@]})) || break
      k=${keys[i]:-k$((i + 1))}
      got+=("$k")
      batch+="INSERT INTO inbox(queue, key, payload) VALUES ('crash', '$k', '{\"n\":$i}');"
    done
    batch+="COMMIT;"
    if sqlite3 "$db" <<<"$batch" >/dev/null 2>>"$dir/producer.err"; then
      printf '%s\n' "${got[@]}" >>"$dir/acked.inbox"
    fi
    sleep 0.0$((RANDOM % 5 + 3))
  done
}

# HTTP: client W posts keys hW-1, hW-2 ... in batches of 10 requests on one
# keep-alive connection (one curl), noting each key answered 202. A key is
# posted once: when the runner is down, the batch fails and the next one
# waits a little.
produce_http() {
  local w=$1 i=1 port cfg codes n
  while [[ ! -e $dir/stop ]]; do
    port=$(<"$dir/port")
    cfg=""
    for ((j = 0; j < 10; j++)); do
      ((j == 0)) || cfg+="next
"
      cfg+="url = \"http://127.0.0.1:$port/queues/crash/items\"
data-binary = \"{\\\"key\\\":\\\"h$w-$((i + j))\\\",\\\"payload\\\":{\\\"n\\\":$((i + j))}}\"
output = \"/dev/null\"
write-out = \"%{http_code}\\n\"
max-time = 5
"
    done
    codes=$(curl -s -K - <<<"$cfg" 2>/dev/null || true)
    n=0
    j=0
    while read -r code; do
      if [[ $code == 202 ]]; then
        echo "h$w-$((i + j))" >>"$dir/acked.http"
        n=$((n + 1))
      fi
      j=$((j + 1))
    done <<<"$codes"
    i=$((i + 10))
    ((n > 0)) || sleep 0.02
    sleep 0.0$((RANDOM % 3 + 1))
  done
}

# One run of the worker, killed with SIGKILL at a random moment. A port
# another process took is given up for a new one.
run_and_kill() {
  local port
  port=$(<"$dir/port")
  "$WQRUN" --quiet --serve --sync "$SYNC" --listen "127.0.0.1:$port" --db "$db" \
    tests/e2e/lua/crash_worker.lua "$log" "$MODE" 2>>"$dir/runner.err" &
  runner=$!
  sleep "0.$((RANDOM % 25 + 5))"
  kill -9 "$runner" 2>/dev/null || true
  wait "$runner" 2>/dev/null || true
  runner=""
  if grep -q "cannot listen" "$dir/runner.err"; then
    echo $((20000 + (RANDOM * 32768 + RANDOM) % 40000)) >"$dir/port"
    sed -i '/cannot listen/d' "$dir/runner.err"
  fi
}

# After each kill, the keys that will run again are exactly those that ran
# (are in the log) but whose row is still in the file, in items or still in
# the inbox (taken from it and run in the same commit window): their
# completion had not been committed. Summed over the kills, that is the
# bound for re-runs.
bound=0
max_inflight=0
measure() {
  sqlite3 -cmd ".timeout 10000" "$db" "select key from items union select key from inbox" |
    sort >"$dir/pending.txt"
  sort -u "$log" >"$dir/ran.txt"
  again=$(comm -12 "$dir/ran.txt" "$dir/pending.txt" | grep -c . || true)
  inflight=$(sqlite3 -cmd ".timeout 10000" "$db" "select count(*) from items where state = 'processing'")
  bound=$((bound + again))
  ((inflight > max_inflight)) && max_inflight=$inflight
  return 0
}

produce_inbox &
producers+=("$!")
produce_http 1 &
producers+=("$!")
produce_http 2 &
producers+=("$!")
for ((k = 1; k <= KILLS; k++)); do
  run_and_kill
  measure
done
touch "$dir/stop"
for p in "${producers[@]}"; do wait "$p"; done
producers=()
rm -f "$dir/stop"

# A last, clean run: it consumes what is left and exits when idle.
timeout 120 "$WQRUN" --quiet --sync "$SYNC" --db "$db" tests/e2e/lua/crash_worker.lua "$log" "$MODE" \
  2>>"$dir/runner.err"

fail=0
sort -u "$log" >"$dir/ran.txt"
touch "$dir/acked.inbox" "$dir/acked.add" "$dir/acked.http"
count() { grep -c . "$1" || true; }
n_inbox=$(count "$dir/acked.inbox") n_add=$(count "$dir/acked.add") n_http=$(count "$dir/acked.http")
sort -u "$dir"/acked.* >"$dir/acked.txt"
acked=$(count "$dir/acked.txt")
comm -23 "$dir/acked.txt" "$dir/ran.txt" >"$dir/lost.txt"
lost=$(count "$dir/lost.txt")
total=$(count "$log")
distinct=$(count "$dir/ran.txt")
reruns=$((total - distinct))
pending=$(sqlite3 "$db" "select count(*) from items")
inbox=$(sqlite3 "$db" "select count(*) from inbox")
echo "crash-test (sync $SYNC, $MODE): $KILLS kills; $acked acknowledged ($n_inbox inbox rows, $n_add wqrun add, $n_http HTTP 202), $lost lost; $distinct distinct keys ran, $reruns re-runs (bound $bound: ran but not committed at a kill; at most $max_inflight processing at a kill); $pending pending, $inbox inbox rows"
((n_http > 0 && n_inbox > 0 && n_add > 1)) || { echo "crash-test: FAIL: a producer got nothing acknowledged" >&2; fail=1; }
((lost == 0)) || { echo "crash-test: FAIL: $lost acknowledged keys never ran: $(head -5 "$dir/lost.txt" | tr '\n' ' ')" >&2; fail=1; }
((pending == 0)) || { echo "crash-test: FAIL: $pending items left pending" >&2; fail=1; }
((inbox == 0)) || { echo "crash-test: FAIL: $inbox inbox rows left" >&2; fail=1; }
((reruns <= bound)) || { echo "crash-test: FAIL: $reruns re-runs exceed $bound" >&2; fail=1; }
if [[ $MODE == keep_done ]]; then
  # Every key again, through the inbox, with kills; nothing may run.
  before=$(count "$log")
  cp "$dir/ran.txt" "$dir/again.txt"
  produce_inbox "$dir/again.txt" &
  producers=("$!")
  for ((k = 1; k <= KILLS / 2 + 1; k++)); do
    run_and_kill
  done
  wait "${producers[0]}"
  producers=()
  timeout 120 "$WQRUN" --quiet --sync "$SYNC" --db "$db" tests/e2e/lua/crash_worker.lua "$log" "$MODE" \
    2>>"$dir/runner.err"
  again=$(($(count "$log") - before))
  left=$(sqlite3 "$db" "select count(*) from items") inbox=$(sqlite3 "$db" "select count(*) from inbox")
  done_rows=$(sqlite3 "$db" "select count(*) from done")
  echo "crash-test (keep_done): all $distinct keys fed again: $again ran again, $done_rows done rows, $left pending, $inbox inbox rows"
  ((again == 0)) || { echo "crash-test: FAIL: $again finished keys ran again" >&2; fail=1; }
  ((left == 0 && inbox == 0)) || { echo "crash-test: FAIL: left $left items, $inbox inbox rows" >&2; fail=1; }
fi
if cat "$dir/runner.err" "$dir/producer.err" 2>/dev/null | grep -v "^$" |
  grep -vE "inbox rows for unknown|stayed locked|writable again" | grep -q .; then
  echo "crash-test: runner and producers said:" >&2
  cat "$dir/runner.err" "$dir/producer.err" 2>/dev/null | sort | uniq -c | head -20 >&2
fi
exit $fail
