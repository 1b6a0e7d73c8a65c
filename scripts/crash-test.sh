#!/usr/bin/env bash
# Crash test for persistence (issue 4): a producer feeds the inbox while the
# runner is killed with SIGKILL at random moments and restarted, many times.
# At the end every key must have run at least once, nothing may be left
# pending, and re-runs must stay within what was in flight at each kill (keys
# that ran but whose completion was not yet committed, measured after each).
# With --keep-done the queue remembers finished keys (keep_done); once every
# key has run, the producer feeds them all again while the runner is killed
# again: none may run a second time (their done rows committed with their
# completion).
#   scripts/crash-test.sh [--short] [--keep-done] [--keys N] [--kills K]
set -euo pipefail
cd "$(dirname "$0")/.."
WQRUN=${WQRUN:-build/wqrun}
KEYS=3000
KILLS=40
MODE=plain
while (($#)); do
  case "$1" in
    --short) KEYS=600; KILLS=10; shift ;;
    --keep-done) MODE=keep_done; shift ;;
    --keys) KEYS=$2; shift 2 ;;
    --kills) KILLS=$2; shift 2 ;;
    *) echo "usage: $0 [--short] [--keep-done] [--keys N] [--kills K]" >&2; exit 2 ;;
  esac
done
[[ -x "$WQRUN" ]] || { echo "crash-test: $WQRUN not built (scripts/build.sh)" >&2; exit 2; }
command -v sqlite3 >/dev/null || { echo "crash-test: needs the sqlite3 shell" >&2; exit 2; }

dir=$(mktemp -d)
runner=""
producer=""
cleanup() {
  [[ -n "$runner" ]] && kill -9 "$runner" 2>/dev/null || true
  [[ -n "$producer" ]] && kill "$producer" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
db=$dir/state.db
log=$dir/ran.log
: >"$log"
"$WQRUN" add --db "$db" crash warmup >/dev/null

# The producer: batches of rows straight into the inbox with the sqlite3
# shell, and every tenth batch through `wqrun add`, as users would.
produce() {
  local i=1 batch
  while ((i <= KEYS)); do
    if (((i / 20) % 10 == 0)); then
      "$WQRUN" add --db "$db" crash "k$i" "{\"n\":$i}" >/dev/null
      i=$((i + 1))
      continue
    fi
    batch=".timeout 10000
BEGIN;"
    for ((j = 0; j < 20 && i <= KEYS; j++, i++)); do
      batch+="INSERT INTO inbox(queue, key, payload) VALUES ('crash', 'k$i', '{\"n\":$i}');"
    done
    batch+="COMMIT;"
    sqlite3 "$db" <<<"$batch" >/dev/null
    sleep 0.0$((RANDOM % 5))
  done
}
produce &
producer=$!

# After each kill, the keys that will run again are exactly those that ran
# (are in the log) but whose row is still in the file, in items or still in
# the inbox (taken from it and run in the same commit window): their
# completion had not been committed. Summed over the kills, that is the
# bound for re-runs.
# One run of the worker, killed with SIGKILL at a random moment.
run_and_kill() {
  "$WQRUN" --quiet --serve --db "$db" tests/e2e/lua/crash_worker.lua "$log" "$MODE" 2>>"$dir/runner.err" &
  runner=$!
  sleep "0.$((RANDOM % 25 + 5))"
  kill -9 "$runner" 2>/dev/null || true
  wait "$runner" 2>/dev/null || true
  runner=""
}

bound=0
max_inflight=0
for ((k = 1; k <= KILLS; k++)); do
  run_and_kill
  sqlite3 -cmd ".timeout 10000" "$db" "select key from items union select key from inbox" |
    sort >"$dir/pending.txt"
  sort -u "$log" >"$dir/ran.txt"
  again=$(comm -12 "$dir/ran.txt" "$dir/pending.txt" | grep -c . || true)
  inflight=$(sqlite3 -cmd ".timeout 10000" "$db" "select count(*) from items where state = 'processing'")
  bound=$((bound + again))
  ((inflight > max_inflight)) && max_inflight=$inflight
done
wait "$producer"
producer=""

# A last, clean run: it consumes what is left and exits when idle.
timeout 120 "$WQRUN" --quiet --db "$db" tests/e2e/lua/crash_worker.lua "$log" "$MODE" 2>>"$dir/runner.err"

fail=0
missing=0
for ((i = 1; i <= KEYS; i++)); do
  grep -qx "k$i" "$log" || missing=$((missing + 1))
done
total=$(grep -c . "$log" || true)
distinct=$(sort -u "$log" | grep -c . || true)
reruns=$((total - distinct))
pending=$(sqlite3 "$db" "select count(*) from items")
inbox=$(sqlite3 "$db" "select count(*) from inbox")
echo "crash-test ($MODE): $KEYS keys, $KILLS kills: $distinct distinct keys ran, $reruns re-runs (bound $bound: ran but not committed at a kill; at most $max_inflight processing at a kill), $pending pending, $inbox inbox rows"
((missing == 0)) || { echo "crash-test: FAIL: $missing keys never ran" >&2; fail=1; }
((pending == 0)) || { echo "crash-test: FAIL: $pending items left pending" >&2; fail=1; }
((inbox == 0)) || { echo "crash-test: FAIL: $inbox inbox rows left" >&2; fail=1; }
((reruns <= bound)) || { echo "crash-test: FAIL: $reruns re-runs exceed $bound" >&2; fail=1; }
if [[ $MODE == keep_done ]]; then
  # Every key again, through the inbox, with kills; nothing may run.
  before=$(grep -c . "$log" || true)
  produce &
  producer=$!
  for ((k = 1; k <= KILLS / 2 + 1; k++)); do
    run_and_kill
  done
  wait "$producer"
  producer=""
  timeout 120 "$WQRUN" --quiet --db "$db" tests/e2e/lua/crash_worker.lua "$log" "$MODE" 2>>"$dir/runner.err"
  again=$(($(grep -c . "$log" || true) - before))
  left=$(sqlite3 "$db" "select count(*) from items") inbox=$(sqlite3 "$db" "select count(*) from inbox")
  done_rows=$(sqlite3 "$db" "select count(*) from done")
  echo "crash-test (keep_done): all $KEYS keys fed again: $again ran again, $done_rows done rows, $left pending, $inbox inbox rows"
  ((again == 0)) || { echo "crash-test: FAIL: $again finished keys ran again" >&2; fail=1; }
  ((left == 0 && inbox == 0)) || { echo "crash-test: FAIL: left $left items, $inbox inbox rows" >&2; fail=1; }
fi
if grep -v "^$" "$dir/runner.err" | grep -vE "inbox rows for unknown|stayed locked|writable again" | grep -q .; then
  echo "crash-test: runner said:" >&2
  sort "$dir/runner.err" | uniq -c | head -20 >&2
fi
exit $fail
