#!/usr/bin/env bash
# Schema version 1 -> 2 -> 3 -> 4 -> 5 -> 6 -> 7 -> 8 end to end (SPEC section 7), through the real wqrun
# binary and the real sqlite3 shell, on copies of tests/store/fixtures/v1.db:
# a state file written by the wqrun of schema version 1 (made by
# tests/store/fixtures/make_v1.lua):
#   - `wqrun status` and `wqrun add` leave it at version 1;
#   - the first run migrates it in place: user_version 8 (through 2, 3, 4, 5, 6 and 7), every
#     version-1 row as it was, items.enqueued_at taken from added_at, the new
#     tables empty, the inbox with grp and priority;
#   - the next run restores the items in order with their payloads, the
#     failure counts and the dead letters, and takes the inbox rows;
#   - rows the new runner writes carry enqueued_at;
#   - a file of a newer version is refused with a message, untouched;
#   - `wqrun status` lists schedules (UTC and local time) and done counts.
. "$(dirname "$0")/lib.sh"

if ! command -v sqlite3 >/dev/null; then
    echo "FAIL: test_migrate needs the sqlite3 shell (apt-get install sqlite3)" >&2
    exit 1
fi

FIXTURE=$WQ_SOURCE_DIR/tests/store/fixtures/v1.db

sql() {
    sqlite3 -batch -separator ' ' -cmd '.timeout 5000' "$@"
}

# Everything a version-1 file holds, in the columns version 1 has.
V1_ROWS="SELECT queue, key, payload, state, ready_at, priority, seq, added_at, updated_at
           FROM items ORDER BY queue, key;
         SELECT * FROM failures ORDER BY queue, key;
         SELECT queue, key, payload, error, attempts, failed_at FROM dead ORDER BY queue, key;
         SELECT id, queue, key, payload, after, created_at FROM inbox ORDER BY id;
         SELECT name, seen_at FROM queues ORDER BY name;
         SELECT * FROM meta ORDER BY name"

DB=$TMP/v1.db
cp "$FIXTURE" "$DB"
expect_eq "$(sql "$DB" "PRAGMA user_version; SELECT count(*) FROM items")" "1
12" "the fixture is a version-1 file with 12 items"
before=$(sql "$DB" "$V1_ROWS")

# ====================================================== add and status do not migrate
run status --db "$DB"
expect_rc 0 "status of a version-1 file"
expect_in "$OUT" "(version 1, migrated when a runner opens it" "status names the version"
expect_re "$OUT" "^mail +7 +1 +2 +0 +0 +2 +0 " "status: mail's counts, DONE 0"
check "status leaves the file byte for byte unchanged" cmp -s "$DB" "$FIXTURE"

cp "$FIXTURE" "$TMP/add.db"
run add --db "$TMP/add.db" mail extra '{"x":1}'
expect_rc 0 "add to a version-1 file"
expect_eq "$(sql "$TMP/add.db" "PRAGMA user_version; SELECT payload FROM inbox WHERE key = 'extra'")" \
    '1
{"x":1}' "add writes the inbox row and leaves the file at version 1"

# ====================================================== the first run migrates
noop=$(script noop.lua <<'LUA'
print("ran")
LUA
)
run --quiet --db "$DB" "$noop"
expect_rc 0 "a run on the version-1 file"
expect_eq "$(sql "$DB" "PRAGMA user_version; PRAGMA application_id; PRAGMA journal_mode")" "8
2003923573
wal" "migrated: user_version 8, still a wqrun state file in WAL mode"
expect_eq "$(sql "$DB" "SELECT count(*), sum(traceback IS NULL) FROM dead;
  SELECT count(*) FROM pragma_table_info('dead') WHERE name = 'traceback'")" "$(sql "$DB" "SELECT count(*), count(*) FROM dead")
1" "version 6: dead.traceback, NULL for the letters written before"
expect_eq "$(sql "$DB" "SELECT count(*) FROM items WHERE progress IS NULL")" \
    "$(sql "$DB" "SELECT count(*) FROM items")" "version 7: items.progress, NULL for every item"
expect_eq "$(sql "$DB" "$V1_ROWS")" "$before" "every version-1 row and column is as it was"
expect_eq "$(sql "$DB" "SELECT count(*), sum(enqueued_at = added_at), count(grp) FROM items")" \
    "12 12 0" "items.enqueued_at is the row's added_at; no groups"
expect_eq "$(sql "$DB" "SELECT group_concat(name, ',') FROM pragma_table_info('done');
                        SELECT group_concat(name, ',') FROM pragma_table_info('schedules');
                        SELECT group_concat(name, ',') FROM pragma_table_info('commands');
                        SELECT group_concat(name, ',') FROM pragma_table_info('queues');
                        SELECT count(*) FROM done; SELECT count(*) FROM schedules;
                        SELECT count(*) FROM commands")" \
    "queue,key,finished_at,result
queue,name,spec,key,payload,next_at,last_at,tz,catch_up,updated_at
id,queue,op,key,state,result,created_at,done_at
name,seen_at,paused,history
0
0
0" "the new tables exist, empty; queues has paused and history (version 8)"
expect_eq "$(sql "$DB" "SELECT count(*) FROM queues WHERE history IS NOT NULL")" "0" \
    "version 8: queues.history is NULL (not told) for the queues of the version-1 file"
expect_eq "$(sql "$DB" "SELECT group_concat(name, ',') FROM pragma_table_info('inbox')")" \
    "id,queue,key,payload,after,created_at,grp,priority,unique_add" \
    "the inbox gained its group (version 2), priority (version 3) and unique_add (version 4) columns"
expect_eq "$(sql "$DB" "SELECT key, state, priority, coalesce(grp, '-'), enqueued_at = datetime(
                          (SELECT added_at FROM items AS i WHERE i.queue = p.queue AND i.key = p.key),
                          'unixepoch')
                        FROM pending AS p WHERE queue = 'mail' LIMIT 3")" "top queued 9 - 1
hi processing 5 - 1
a queued 0 - 1" "the pending view has grp and enqueued_at"
migrated=$(sql "$DB" "SELECT * FROM items ORDER BY queue, key")
run --quiet --db "$DB" "$noop"
expect_eq "$(sql "$DB" "PRAGMA user_version; SELECT * FROM items ORDER BY queue, key")" "8
$migrated" "a second run changes nothing"
cp "$DB" "$TMP/migrated.db"

# ====================================================== the next run restores everything
restore=$(script restore.lua <<'LUA'
-- A payload as canonical text (sorted keys), so Lua's table order does not matter.
local function show(v)
    if type(v) ~= "table" then
        return v == nil and "nil" or wq.json.encode(v)
    end
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    local parts = {}
    for _, k in ipairs(keys) do parts[#parts + 1] = tostring(k) .. "=" .. show(v[k]) end
    return "{" .. table.concat(parts, ",") .. "}"
end
local mail = wq.queue("mail", {handler = function(key, payload)
    print("ran " .. key .. " " .. show(payload))
end})
local flaky = wq.queue("flaky", {max_retries = 5, limiter = wq.limiter.exponential(3600, 3600)})
local doomed = wq.queue("doomed")
print("requeues f1 " .. flaky:num_requeues("f1") .. " f2 " .. flaky:num_requeues("f2"))
for _, d in ipairs(doomed:dead()) do
    print("dead " .. d.key .. " " .. show(d.payload) .. " " .. d.error .. " " .. d.attempts)
end
wq.sleep(1)
wq.exit(0)
LUA
)
run --quiet --db "$DB" "$restore"
expect_rc 0 "a run restoring the migrated file"
expect_eq "$(printf '%s\n' "$OUT" | grep -E '^ran (top|hi|a|b|c|d|both|lo) ')" 'ran top {rank=2}
ran hi {urgent=true}
ran a {big=123456789012345678,f=0.1,n=1,to="alice"}
ran b "just a string"
ran c nil
ran d {list={1=1,2=2,3=3}}
ran both "queued and delayed"
ran lo nil' "the queued items run in priority and FIFO order with their payloads"
expect_in "$OUT" 'ran inbox-1 {to="carol"}' "the inbox row was taken and ran"
expect_in "$OUT" "requeues f1 1 f2 1" "failure counts continue"
expect_in "$OUT" 'dead d1 {why="error"} tests/store/fixtures/make_v1.lua:38: doomed d1 1' \
    "dead letter d1 with payload, error and attempts"
expect_in "$OUT" "dead d2 nil returned false 1" "dead letter d2"
expect_eq "$(sql "$DB" "SELECT count(*) FROM items WHERE queue = 'mail' AND key IN
                          ('top', 'hi', 'a', 'b', 'c', 'd', 'lo', 'inbox-1');
                        SELECT queue, key FROM inbox; SELECT count(*) FROM dead")" "0
nosuch orphan
2" "the items that ran left the file ('both' has a delayed add left); the other queue's inbox row waits; dead letters stay"

# ====================================================== new rows carry enqueued_at
fresh=$(script fresh.lua <<'LUA'
local q = wq.queue("fresh")
q:add("k", {n = 1})
q:add_after("later", 3600)
LUA
)
t0=$(date +%s)
run --quiet --db "$DB" "$fresh"
expect_rc 0 "a run adding new items"
expect_eq "$(sql "$DB" "SELECT key, abs(enqueued_at - $t0) < 60, grp IS NULL FROM items
                        WHERE queue = 'fresh' ORDER BY key")" "k 1 1
later 1 1" "new rows get enqueued_at (now) and no group"

# ====================================================== a newer file is refused
NEWER=$TMP/v9.db
cp "$TMP/migrated.db" "$NEWER"
sql "$NEWER" "PRAGMA user_version = 9"
cp "$NEWER" "$TMP/v9.orig"
run --quiet --db "$NEWER" "$noop"
expect_rc 1 "a version-9 file is refused"
expect_in "$ERR" "$NEWER is a wqrun state file of version 9, newer than this wqrun understands (8); use a newer wqrun" \
    "the message names the file and both versions"
check "the refused file is unchanged" cmp -s "$NEWER" "$TMP/v9.orig"
check "no -wal or -shm file is left" test ! -e "$NEWER-wal" -a ! -e "$NEWER-shm"

# ====================================================== status: schedules and done counts
sql "$TMP/migrated.db" "INSERT INTO done(queue, key, finished_at, result) VALUES
                          ('mail', 'x', 1700000000, NULL), ('mail', 'y', 1700000001, '\"ok\"');
                        INSERT INTO schedules(queue, name, spec, key, next_at, last_at, tz) VALUES
                          ('mail', 'digest', '0 7 * * 1-5', 'digest', 1700000000, NULL, 'local'),
                          ('flaky', 'tick', '@every 5m', 'tick', 1700000300, 1700000000, 'utc')"
TZ=XST-3 run status --db "$TMP/migrated.db"
expect_rc 0 "status of a version-5 file with schedules"
expect_in "$OUT" "(version 8, " "status: version 8"
expect_re "$OUT" "^mail +7 +1 +2 +0 +0 +2 +2 " "status: mail has 2 done rows"
expect_in "$OUT" "schedules:" "status lists the schedules"
expect_re "$OUT" "^flaky +tick +@every 5m +utc +2023-11-14 22:18:20 +2023-11-15 01:18:20 XST +2023-11-14 22:13:20$" \
    "a schedule's next run in UTC and local time, its last run"
expect_re "$OUT" "^mail +digest +0 7 \* \* 1-5 +local +2023-11-14 22:13:20 +2023-11-15 01:13:20 XST +never$" \
    "a schedule that never ran"

finish
