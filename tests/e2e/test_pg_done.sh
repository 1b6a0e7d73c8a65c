#!/usr/bin/env bash
# keep_done across runners (SPEC 7.2, 8.2), read back with psql: two worker
# runners and an API runner share a database; a key finished on one worker
# is skipped when added again through the API runner's HTTP (also a batch),
# `wqrun add`, `wqrun.add()` and `wqrun.add_many()`, and from a third
# runner's Lua; the result a worker returned is what q:done_info() shows on
# another runner; force and forget_done work across runners; a memory past
# keep_done no longer skips and its row is pruned.
. "$(dirname "$0")/lib.sh"
pg_need

LUA=$E2E_DIR/lua
DB=$(pg_fresh_db)
LOG=$TMP/runs.log
: >"$LOG"
q() { pg_psql "$DB" "$1"; }

pg_bg w1 --quiet --serve --db "$DB" --runner-name w1 "$LUA/pg_done.lua" "$LOG" w1
W1=$BG_PID
pg_bg w2 --quiet --serve --db "$DB" --runner-name w2 "$LUA/pg_done.lua" "$LOG" w2
W2=$BG_PID
listen_start -- --serve --db "$DB" --runner-name api "$LUA/pg_done_api.lua" || finish
check "three runners registered" pg_wait "$DB" "select count(*) from wqrun.runners" 3 10
expect_eq "$(q "select keep_done from wqrun.queues where name = 'kd'")" 3600 "keep_done stored with the queue"

run add --db "$DB" kd k1
expect_eq "$OUT" queued "k1 queued"
check "k1 ran" wait_for "$LOG" "run kd k1 " 1 5
check "k1 remembered" pg_wait "$DB" "select count(*) from wqrun.done where key = 'k1'" 1 5
BY=$(awk '/^run kd k1 / { print $4 }' "$LOG")
expect_eq "$(q "select result->>'by' from wqrun.done where key = 'k1'")" "$BY" "the done row holds the result of the run"

run add --db "$DB" kd k1
expect_eq "$OUT" "skipped: done" "wqrun add of a finished key"
expect_eq "$(q "select wqrun.add('kd', 'k1')")" "skipped: done" "wqrun.add() of a finished key"
expect_eq "$(q "select wqrun.add_many('[{\"queue\":\"kd\",\"key\":\"k1\"},{\"queue\":\"kd\",\"key\":\"k2\"}]')")" \
    '["skipped: done", "queued"]' "wqrun.add_many(): skipped, and a new key queued"
expect_eq "$(curl -s -X POST -d '{"key":"k1"}' "$BASE/queues/kd/items")" \
    '{"queued":false,"reason":"done"}' "HTTP add of a finished key through the API runner"
expect_eq "$(curl -s -X POST -d '[{"key":"k1"},{"key":"k3"}]' "$BASE/queues/kd/items:batch")" \
    '{"results":[{"queued":false,"reason":"done"},{"queued":true}]}' "HTTP batch: skipped and queued"
check "k2 and k3 ran" wait_for "$LOG" "run kd k" 3 5
sleep 0.3
expect_eq "$(grep -c '^run kd k1 ' "$LOG")" 1 "k1 ran once"

# Another runner's Lua sees the memory and the worker's result.
run --quiet --db "$DB" --runner-name check "$LUA/pg_done_check.lua" info:k1 add:k1 info:nope
expect_rc 0 "the checking runner"
expect_eq "$OUT" "info	k1	$BY	number
add	k1	false	done
info	nope	none	-" "q:done_info shows the worker's result; q:add skips; an unknown key has none"

# force, over HTTP and from Lua: runs again, and the memory is the new run's.
expect_eq "$(curl -s -X POST -d '{"key":"k1","force":true}' "$BASE/queues/kd/items")" '{"queued":true}' "HTTP forced add"
check "k1 ran again" wait_for "$LOG" "run kd k1 " 2 5
run --quiet --db "$DB" --runner-name check "$LUA/pg_done_check.lua" force:k2
expect_eq "$OUT" "force	k2	true" "a forced add from Lua"
check "k2 ran again" wait_for "$LOG" "run kd k2 " 2 5
check "k2's memory is its second run's" pg_wait "$DB" \
    "select (result->>'n')::int > 1 or result->>'by' <> '$(awk '/^run kd k2 / { print $4; exit }' "$LOG")' from wqrun.done where key = 'k2'" t 5

# forget_done from Lua: the next add runs it.
run --quiet --db "$DB" --runner-name check "$LUA/pg_done_check.lua" forget:k3 forget:k3 add:k3
expect_eq "$OUT" "forget	k3	true
forget	k3	false
add	k3	true" "forget_done, once; then the add is queued"
check "k3 ran again" wait_for "$LOG" "run kd k3 " 2 5

# A memory past keep_done (1 s) no longer skips; expired rows are pruned.
run add --db "$DB" short s1
check "s1 ran" wait_for "$LOG" "run short s1 " 1 5
run add --db "$DB" short s1
expect_eq "$OUT" "skipped: done" "within keep_done: skipped"
sleep 1.2
run add --db "$DB" short s1
expect_eq "$OUT" queued "past keep_done: queued again"
check "s1 ran again" wait_for "$LOG" "run short s1 " 2 5
q "insert into wqrun.done (queue, key, finished_at) values ('short', 'old', now() - interval '1 hour')" >/dev/null
check "an expired memory is pruned (every 5 s)" pg_wait "$DB" "select count(*) from wqrun.done where key = 'old'" 0 12

for p in "$W1" "$W2" "$PID"; do kill -TERM "$p"; done
for p in "$W1" "$W2" "$PID"; do wait_exit "$p" 10; expect_eq "$RC" 0 "runner $p stops cleanly"; done
finish
