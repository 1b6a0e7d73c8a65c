#!/usr/bin/env bash
# Group limits end to end (SPEC 7.4, issue 11): the crawler of the issue
# under --virtual-time (the fast host keeps its rate while the slow one is
# throttled), groups kept in items.grp across a restart and a kill -9, and
# the group field of wqrun add (inbox), HTTP, and group_of on those paths.
. "$(dirname "$0")/lib.sh"

command -v sqlite3 >/dev/null || { echo "FAIL: needs sqlite3" >&2; exit 1; }
command -v curl >/dev/null || { echo "FAIL: needs curl" >&2; exit 1; }
sql() { sqlite3 -batch -cmd '.timeout 5000' "$@"; }
LUA=$E2E_DIR/lua/groups_persist.lua

# ------------------------------------------------------- no head-of-line blocking
run --virtual-time "$E2E_DIR/lua/crawler_hosts.lua"
expect_rc 0 "the crawler runs"
fast=$(printf '%s\n' "$OUT" | awk '$1 == "second" { n += $4 } END { print n + 0 }')
slow=$(printf '%s\n' "$OUT" | awk '$1 == "second" { n += $6 } END { print n + 0 }')
fast_min=$(printf '%s\n' "$OUT" | awk '$1 == "second" { if (m == "" || $4 < m) m = $4 } END { print m + 0 }')
slow_max=$(printf '%s\n' "$OUT" | awk '$1 == "second" { if ($6 > m) m = $6 } END { print m + 0 }')
expect_between "$fast" 1490 1510 "the fast host got ~50 requests/s for 30 s while the slow one was throttled"
expect_between "$fast_min" 49 51 "the fast host got its 50 in every single second"
expect_between "$slow" 59 61 "the slow host got its 2 requests/s"
expect_between "$slow_max" 2 2 "the slow host never got more than 2 in a second"

# ------------------------------------------------ items.grp across restarts
DB=$TMP/groups.db
run --db "$DB" "$LUA" fill
expect_rc 0 "fill: 12 grouped keys and one without a group"
expect_eq "$(sql "$DB" "SELECT coalesce(grp, '-'), count(*) FROM items GROUP BY grp ORDER BY grp")" \
    "-|1
group-1|4
group-2|4
group-3|4" "sqlite3 reads each item's group in items.grp"
run --db "$DB" "$LUA" run
expect_rc 0 "the restart runs every restored key"
expect_eq "$(printf '%s\n' "$OUT" | grep -c '^ran ')" 13 "all 13 ran"
expect_in "$OUT" "ran loner - -" "the key without a group ran (first: priority 5)"
expect_in "$OUT" "ran g2-k3 group-2 3" "restored keys keep group and payload"
expect_in "$OUT" "most at once in a group 1" "the restored groups obey concurrency 1"
expect_eq "$(printf '%s\n' "$OUT" | awk '$1 == "ran" && $3 == "group-1" { printf "%s ", $2 }')" \
    "g1-k1 g1-k2 g1-k3 g1-k4 " "a group's keys run in FIFO order"
expect_eq "$(sql "$DB" "SELECT count(*) FROM items")" 0 "nothing left"

# kill -9 while grouped keys run: the rows keep their group, the next run obeys it
DB2=$TMP/groups-kill.db
run --db "$DB2" "$LUA" fill
slow=$(script slow.lua <<'LUA'
wq.queue("hosts", {workers = 8, group_limit = {concurrency = 2}, handler = function(key)
    print("started " .. key)
    io.stdout:flush()
    wq.sleep(30)
end})
LUA
)
"$WQRUN" --db "$DB2" "$slow" >"$TMP/slow.out" 2>&1 &
pid=$!
PIDS+=("$pid")
check "seven keys processing" wait_for "$TMP/slow.out" started 7 10
sleep 0.3 # more would start now if a limit let them
expect_eq "$(grep '^started' "$TMP/slow.out" | sed 's/-k.*//' | sort | uniq -c | awk '{ print $2, $3, $1 }')" \
    "started g1 2
started g2 2
started g3 2
started loner 1" "concurrency 2 per group: two keys of each group started, the rest held"
kill -9 "$pid"
wait "$pid" 2>/dev/null
expect_eq "$(sql "$DB2" "SELECT coalesce(grp, '-'), count(*) FROM items GROUP BY grp ORDER BY grp")" \
    "-|1
group-1|4
group-2|4
group-3|4" "after kill -9 every row is there with its group"
run --db "$DB2" "$LUA" run
expect_eq "$(printf '%s\n' "$OUT" | grep -c '^ran ')" 13 "after the kill every key ran"
expect_in "$OUT" "most at once in a group 1" "and the groups still obey their limit"

# ---------------------------------------- wqrun add --group, HTTP and group_of
DB3=$TMP/groups-serve.db
run add --db "$DB3" hosts "x-1" '{"n":1}' --group cli-group
expect_rc 0 "wqrun add --group"
expect_eq "$(sql "$DB3" "SELECT grp FROM inbox WHERE key = 'x-1'")" "cli-group" "the inbox row holds the group"
run add --db "$DB3" hosts "x-2" --group "$(head -c 1025 /dev/zero | tr '\0' g)"
expect_rc 2 "a group over 1024 bytes is refused"
listen_start -- --serve --db "$DB3" "$LUA" serve || true
check "the inbox row ran" wait_for "$OUTF" "ran x-1 cli-group 1" 1 10
code=$(curl -s -o "$TMP/body" -w '%{http_code}' --data-binary '{"key":"y-1","payload":{"n":7},"group":"http-group"}' "$BASE/queues/hosts/items")
expect_eq "$code" 202 "POST with a group"
check "the posted item ran" wait_for "$OUTF" "ran y-1 http-group 7" 1 10
code=$(curl -s -o "$TMP/body" -w '%{http_code}' --data-binary '{"key":"zed-1"}' "$BASE/queues/hosts/items")
expect_eq "$code" 202 "POST without a group: group_of names it"
check "group_of's group" wait_for "$OUTF" "ran zed-1 zed -" 1 10
code=$(curl -s -o "$TMP/body" -w '%{http_code}' --data-binary '{"key":"bad-1"}' "$BASE/queues/hosts/items")
expect_eq "$code" 422 "a group_of that raises refuses the POST"
expect_in "$(cat "$TMP/body")" "no group for bad-1" "with group_of's error"
code=$(curl -s -o "$TMP/body" -w '%{http_code}' --data-binary '{"key":"y-2","group":5}' "$BASE/queues/hosts/items")
expect_eq "$code" 400 "a group that is not a string is a 400"

# examples/crawler.lua against this runner's HTTP server, as two hosts
{
    for i in 1 2 3 4 5; do echo "http://127.0.0.1:$PORT/healthz?i=$i"; done
    for i in 1 2 3 4 5; do echo "http://localhost:$PORT/queues?i=$i"; done
    echo "http://127.0.0.1:$PORT/no-such-page"
} >"$TMP/urls.txt"
run --db "$TMP/crawl.db" "$E2E_DIR/../../examples/crawler.lua" "@$TMP/urls.txt"
expect_rc 0 "the crawler example runs"
expect_in "$OUT" "fetched 10 pages" "it fetched every page"
expect_re "$OUT" "127.0.0.1 +5 pages" "five from one host"
expect_re "$OUT" "localhost +5 pages" "five from the other"
expect_in "$OUT" "1 URLs failed for good, e.g. http://127.0.0.1:$PORT/no-such-page: HTTP 404" \
    "a 404 is a permanent failure"
run --db "$TMP/crawl.db" "$E2E_DIR/../../examples/crawler.lua" "@$TMP/urls.txt"
expect_in "$OUT" "fetched 0 pages" "run again: keep_done skips what was fetched"

kill -TERM "$PID"
wait "$PID" 2>/dev/null
expect_eq "$(sql "$DB3" "SELECT count(*) FROM items WHERE key LIKE 'bad%' OR key = 'y-2'")" 0 \
    "refused posts changed nothing"

finish
