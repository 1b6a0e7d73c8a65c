#!/usr/bin/env bash
# A damaged state file (issue 9, item 3), through the real wqrun binary and
# the real sqlite3 shell: a file written by wqrun, then six bytes of one leaf
# page of `items` overwritten (PRAGMA integrity_check reports it), is refused
# by `wqrun --db`, `wqrun status` and `wqrun add` with status 1 and a message
# naming the file, and stays byte for byte as it was, with no -wal or -shm
# file next to it. The same with the -wal file a kill -9 leaves behind (then
# the file is read through its WAL): both files stay as they are.
. "$(dirname "$0")/lib.sh"

if ! command -v sqlite3 >/dev/null; then
    echo "FAIL: test_damaged needs the sqlite3 shell (apt-get install sqlite3)" >&2
    exit 1
fi

DB=$TMP/state.db

fill=$(script fill.lua <<'EOF'
local q = wq.queue("jobs")
for i = 1, 3000 do
    q:add(string.format("key-%06d", i), {n = i, pad = string.rep("x", 40)})
end
wq.exit(0)
EOF
)
count=$(script count.lua <<'EOF'
print("started")
local q = wq.queue("jobs")
print("restored " .. q:len())
wq.exit(0)
EOF
)

# ---- a sound file: written, then read back whole -------------------------------
run --quiet --db "$DB" "$fill"
expect_rc 0 "filling the state file"
run --quiet --db "$DB" "$count"
expect_rc 0 "restoring the sound file"
expect_in "$OUT" "restored 3000" "every item comes back"
check "a clean exit leaves no -wal file" test ! -e "$DB-wal"

# ---- six bytes of one leaf page of items ----------------------------------------
page_size=$(sqlite3 "file:$DB?immutable=1" 'PRAGMA page_size')
leaf=$(sqlite3 "file:$DB?immutable=1" \
    "SELECT pageno FROM dbstat WHERE name = 'items' AND pagetype = 'leaf' ORDER BY pageno LIMIT 1 OFFSET 10")
check "found a leaf page of items (page size $page_size, page $leaf)" test -n "$leaf" -a -n "$page_size"
# Bytes 8-13 of a leaf page are its first three cell pointers: now past the page's end.
printf '\377\377\377\377\377\377' |
    dd of="$DB" bs=1 seek=$(((leaf - 1) * page_size + 8)) conv=notrunc status=none
ic=$(sqlite3 "file:$DB?immutable=1" 'PRAGMA integrity_check' 2>&1)
check "integrity_check reports the damage: $ic" test "$ic" != "ok"
cp "$DB" "$TMP/damaged-copy.db"

# ---- refused by the runner, status and add; the file stays as it is ------------
run --quiet --db "$DB" "$count"
expect_rc 1 "wqrun --db on a damaged file"
expect_in "$ERR" "$DB" "the message names the file"
expect_in "$ERR" "damaged" "the message says what is wrong"
expect_not_in "$OUT" "started" "the script does not run"

run status --db "$DB"
expect_rc 1 "wqrun status on a damaged file"
expect_in "$ERR" "$DB" "status names the file"
expect_in "$ERR" "damaged" "status says what is wrong"

run add --db "$DB" jobs new-key '{"a":1}'
expect_rc 1 "wqrun add on a damaged file"
expect_in "$ERR" "$DB" "add names the file"
expect_in "$ERR" "damaged" "add says what is wrong"

check "the damaged file is byte for byte unchanged" cmp -s "$DB" "$TMP/damaged-copy.db"
check "no -wal file next to it" test ! -e "$DB-wal"
check "no -shm file next to it" test ! -e "$DB-shm"

# ---- damage next to the -wal file of a killed runner -----------------------------
DB=$TMP/killed.db
hold=$(script hold.lua <<'EOF'
local q = wq.queue("jobs")
q:add("one-more", "x")
wq.sleep(0.2)
print("committed")
io.stdout:flush()
wq.sleep(30)
EOF
)
run --quiet --db "$DB" "$fill"
expect_rc 0 "filling the second state file"
"$WQRUN" --quiet --db "$DB" "$hold" >"$TMP/hold.out" 2>&1 </dev/null &
pid=$!
check "the runner commits" wait_for "$TMP/hold.out" committed 1 10
kill -KILL "$pid"
wait_exit "$pid" 5
check "kill -9 leaves a -wal file" test -s "$DB-wal"
leaf=$(sqlite3 "file:$DB?immutable=1" \
    "SELECT pageno FROM dbstat WHERE name = 'items' AND pagetype = 'leaf' ORDER BY pageno LIMIT 1 OFFSET 10")
printf '\377\377\377\377\377\377' |
    dd of="$DB" bs=1 seek=$(((leaf - 1) * page_size + 8)) conv=notrunc status=none
cp "$DB" "$TMP/killed-copy.db"
cp "$DB-wal" "$TMP/killed-copy.db-wal"
run --quiet --db "$DB" "$count"
expect_rc 1 "wqrun --db on a damaged file with a -wal file"
expect_in "$ERR" "$DB is damaged" "the message names the file and says what is wrong"
run status --db "$DB"
expect_rc 1 "wqrun status on it"
run add --db "$DB" jobs new-key
expect_rc 1 "wqrun add on it"
check "the damaged file is byte for byte unchanged" cmp -s "$DB" "$TMP/killed-copy.db"
check "its -wal file is byte for byte unchanged" cmp -s "$DB-wal" "$TMP/killed-copy.db-wal"

finish
