#!/usr/bin/env bash
# Running wqrun as a service (issue 19): systemd's notification protocol
# (READY=1 once the listener answers, STOPPING=1 at the drain, WATCHDOG=1
# every half WatchdogSec) against a stand-in notification socket; adds
# posted during a graceful drain accepted, committed to the state file's
# inbox and run by the next start (on PostgreSQL: committed to the database
# and run by another runner); log lines as JSON (RFC 3339 UTC,
# levels, fields) or text with a time zone, --log-level, the start-up and
# stop lines (the password of a database URL never shown); every option
# from a WQRUN_* variable, the command line winning.
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || { echo "FAIL: needs python3" >&2; exit 1; }
command -v sqlite3 >/dev/null || { echo "FAIL: needs sqlite3" >&2; exit 1; }
sql() { sqlite3 -batch -cmd '.timeout 5000' "$@"; }

SLOW=$(script slow.lua <<'LUA'
local q = wq.queue("jobs", {workers = 2, handler = function(key)
    if key:match("^slow") then wq.sleep(1.5) end
    print("ran " .. key)
    io.stdout:flush()
end})
if arg[1] == "first" then q:add("slow-1") end
LUA
)

# ------------------------------------------------ sd_notify: READY, WATCHDOG, STOPPING
python3 "$E2E_DIR/notify_listener.py" "$TMP/notify.sock" "$TMP/notify.log" &
LISTENER=$!
PIDS+=("$LISTENER")
for _ in $(seq 100); do [ -s "$TMP/notify.log" ] && break; sleep 0.02; done
for try in 1 2 3 4 5 6; do # another port when that one is taken
    PORT=$(rand_port)
    NOTIFY_SOCKET=$TMP/notify.sock WATCHDOG_USEC=200000 "$WQRUN" --serve --db "$TMP/a.db" \
        --listen "127.0.0.1:$PORT" "$SLOW" first >"$TMP/a.out" 2>"$TMP/a.err" &
    PID=$!
    PIDS+=("$PID")
    for _ in $(seq 250); do
        grep -q "READY=1" "$TMP/notify.log" && break
        kill -0 "$PID" 2>/dev/null || break
        sleep 0.02
    done
    grep -q "READY=1" "$TMP/notify.log" && break
    wait "$PID" 2>/dev/null
    grep -q "cannot listen" "$TMP/a.err" || break
    rm -f "$TMP/a.db" "$TMP/a.db-wal" "$TMP/a.db-shm"
done
[ -s "$TMP/a.err" ] && grep -v "INFO" "$TMP/a.err" | head -5 >&2
# READY=1 comes once the listener is up: /healthz answers at once.
expect_eq "$(curl -s -m 2 "http://127.0.0.1:$PORT/healthz")" ok "the listener answers when READY=1 has arrived"
expect_in "$(cat "$TMP/notify.log")" "READY=1" "READY=1 is sent"
expect_re "$(cat "$TMP/notify.log")" "STATUS=running: 1 queue\(s\), listening on 127.0.0.1:$PORT" "STATUS says what runs"
expect_in "$(cat "$TMP/notify.log")" "MAINPID=$PID" "MAINPID is the runner"
sleep 0.6
n=$(grep -c "WATCHDOG=1" "$TMP/notify.log")
expect_between "$n" 3 12 "WATCHDOG=1 every half WatchdogSec (0.1 s) while the loop turns"

# ------------------------------------------------ adds during a graceful drain
kill -TERM "$PID"
for _ in $(seq 100); do grep -q "STOPPING=1" "$TMP/notify.log" && break; sleep 0.02; done
expect_in "$(cat "$TMP/notify.log")" "STOPPING=1" "STOPPING=1 at the drain"
body=$(curl -s -m 5 -w ' %{http_code}' -d '{"key":"posted-1","payload":{"n":1},"priority":7}' "http://127.0.0.1:$PORT/queues/jobs/items")
expect_eq "$body" '{"queued":true,"deferred":true} 202' "an add during the drain is accepted (202, deferred)"
body=$(curl -s -m 5 -w ' %{http_code}' -d '[{"key":"posted-2"},{"key":"posted-3","after":0.5}]' \
    "http://127.0.0.1:$PORT/queues/jobs/items:batch")
expect_eq "$body" '{"results":[{"queued":true,"deferred":true},{"queued":true,"deferred":true}]} 202' \
    "a batch during the drain too"
# Acknowledged means kept: the rows are in the file before the runner has even ended.
expect_eq "$(sql "$TMP/a.db" "SELECT group_concat(key || '=' || coalesce(payload, '-'), ' ') FROM (SELECT * FROM inbox ORDER BY id)")" \
    'posted-1={"n":1} posted-2=- posted-3=-' "sqlite3 reads the acknowledged adds in the inbox at once"
expect_eq "$(sql "$TMP/a.db" "SELECT priority FROM inbox WHERE key = 'posted-1'")" 7 "with their priority"
body=$(curl -s -m 5 -w ' %{http_code}' -d '{"key":"posted-4","unique":true}' "http://127.0.0.1:$PORT/queues/jobs/items")
expect_eq "$body" '{"queued":true,"deferred":true} 202' "a unique add during the drain"
expect_eq "$(sql "$TMP/a.db" "SELECT group_concat(key || '=' || coalesce(unique_add, '-'), ' ') FROM (SELECT * FROM inbox ORDER BY id)")" \
    'posted-1=- posted-2=- posted-3=- posted-4=1' "the inbox keeps that it is unique"
wait_exit "$PID" 10
expect_eq "$RC" 0 "the drain ends normally"
expect_in "$(cat "$TMP/a.out")" "ran slow-1" "the running handler finished"
expect_not_in "$(cat "$TMP/a.out")" "ran posted" "nothing posted during the drain ran in the stopping runner"
run --db "$TMP/a.db" "$SLOW"
expect_rc 0 "the next start"
expect_eq "$(printf '%s\n' "$OUT" | grep -c '^ran posted-')" 4 "the next start runs all four"
expect_eq "$(sql "$TMP/a.db" "SELECT count(*) FROM inbox")" 0 "the inbox is empty after"

# Without a state file nothing could keep it: 503 during the drain.
"$WQRUN" --serve --listen "127.0.0.1:$((PORT + 1))" "$SLOW" first >/dev/null 2>"$TMP/nodb.err" &
PID=$!
PIDS+=("$PID")
for _ in $(seq 100); do [ "$(curl -s -m 1 "http://127.0.0.1:$((PORT + 1))/healthz")" = ok ] && break; sleep 0.05; done
kill -TERM "$PID"
wait_for "$TMP/nodb.err" "finishing running handlers" 1 10 || fail "no drain after SIGTERM: $(cat "$TMP/nodb.err")"
code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' -d '{"key":"x"}' "http://127.0.0.1:$((PORT + 1))/queues/jobs/items")
expect_eq "$code" 503 "no state file: an add during the drain is refused, not lost"
wait_exit "$PID" 10

# ------------------------------------------------ unique adds over HTTP
listen_start -- --serve --db "$TMP/u.db" "$SLOW"
post() { curl -s -m 5 -w ' %{http_code}' -d "$1" "$BASE/queues/jobs/items"; }
expect_eq "$(post '{"key":"slow-u","payload":{"v":1}}')" '{"queued":true} 202' "a first add"
for _ in $(seq 200); do # it is running now (1.5 s)
    curl -s -m 5 "$BASE/queues/jobs/items/slow-u" | grep -q '"state":"processing"' && break
    sleep 0.05
done
expect_eq "$(post '{"key":"slow-u","payload":{"v":2},"unique":true}')" '{"queued":false,"reason":"processing"} 202' \
    "unique while it runs: nothing changes, and the answer says why"
expect_eq "$(post '{"key":"later","after":60,"unique":true}')" '{"queued":true} 202' "a unique delayed add"
expect_eq "$(post '{"key":"later","unique":true}')" '{"queued":false,"reason":"pending"} 202' \
    "unique while it waits: not run now"
expect_eq "$(post '{"key":"x","unique":1}')" '{"error":"unique must be true or false, got int"} 400' "unique must be a boolean"
wait_for "$OUTF" "ran slow-u" 1 10 || fail "slow-u did not end"
expect_eq "$(grep -c '^ran slow-u' "$OUTF")" 1 "the unique add made no follow-up run"
kill -TERM "$PID"
wait "$PID" 2>/dev/null

# ------------------------------------------------ log formats and levels
FAILS=$(script fails.lua <<'LUA'
local q = wq.queue("mail", {max_retries = 1, limiter = wq.limiter.fast_slow(0.01, 0.01, 5),
    handler = function(key)
        if key == "bounce-1" then return wq.fail("550 no such user") end
        error("smtp: 421 try later\nsecond line")
    end})
q:add("user-7")
if arg[1] == "fail" then q:add("bounce-1") end -- a dead letter made by wq.fail too
wq.log("hello from the script")
LUA
)
run --log-format json --db "$TMP/b.db" "$FAILS" fail
expect_rc 3 "a JSON-logging run (its keys are dead-lettered: 3)"
bad=$(printf '%s\n' "$ERR" | python3 -c '
import json, re, sys
bad = 0
for line in sys.stdin:
    try:
        o = json.loads(line)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", o["time"])
        assert o["level"] in ("debug", "info", "warn", "error") and isinstance(o["msg"], str)
    except Exception as e:
        bad += 1
        print("not a log line:", line.strip(), e, file=sys.stderr)
print(bad)')
expect_eq "$bad" 0 "every stderr line is a JSON object with an RFC 3339 UTC time, a level and a message"
field() { printf '%s\n' "$ERR" | python3 -c "
import json, sys
for line in sys.stdin:
    o = json.loads(line)
    if $1:
        print($2)
        break"; }
expect_eq "$(field '"started" in o["msg"]' 'o["version"], o["db"], o["queues"]')" \
    "$("$WQRUN" --version | awk '{ print $2 }') sqlite $TMP/b.db mail" "the start-up line: version, backend and file, queues"
expect_eq "$(field 'o.get("outcome") == "retry"' 'o["level"], o["queue"], o["key"], o["attempt"], o["error"]')" \
    "warn mail user-7 1 $TMP/fails.lua:4: smtp: 421 try later" "a failed attempt: warn, with queue, key, attempt and the error's first line"
expect_eq "$(field 'o.get("outcome") == "dead" and o["key"] == "user-7"' 'o["level"], o["attempt"]')" "error 2" \
    "the dead letter (retries exhausted): error level"
expect_eq "$(field 'o.get("outcome") == "dead" and o["key"] == "bounce-1"' 'o["level"], o["attempt"], o["error"]')" \
    "error 1 550 no such user" "the dead letter made by wq.fail: error level too (docs/deploy.md)"
expect_eq "$(field 'o["msg"] == "hello from the script"' 'o["level"]')" info "wq.log is an info line"
expect_eq "$(field '"stopped" in o["msg"]' 'o["status"]')" 3 "the stop line with the exit status"

run --db "$TMP/c.db" "$FAILS"
expect_re "$ERR" "^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}[+-][0-9]{2}:[0-9]{2} INFO wqrun: wqrun .* started" \
    "text lines carry the time zone's offset and the level"
expect_re "$ERR" "WARN wqrun: mail: 'user-7' failed \(attempt 1\), next try in" "a retried failure is a WARN line"
run --log-level error --db "$TMP/d.db" "$FAILS" fail
expect_not_in "$ERR" "INFO" "--log-level error drops info lines"
expect_not_in "$ERR" "WARN" "and warn lines"
expect_in "$ERR" "ERROR wqrun: mail: 'user-7' failed 2 times, dead-lettered" "and keeps error lines"
expect_in "$ERR" "ERROR wqrun: mail: 'bounce-1' failed for good (wq.fail, attempt 1), dead-lettered: 550 no such user" \
    "a wq.fail dead letter among them"
run --log-format yaml "$FAILS"
expect_rc 2 "an unknown log format is a usage error"
expect_in "$ERR" "--log-format takes text or json, got 'yaml'" "and says what it takes"

# ------------------------------------------------ operator actions logged whatever their source
listen_start -- --serve --db "$TMP/ops.db" "$FAILS"
for _ in $(seq 100); do grep -q "dead-lettered" "$ERRF" && break; sleep 0.05; done
code=$(curl -s -m 5 -o /dev/null -w '%{http_code}' -X POST "$BASE/queues/mail/dead/user-7/retry")
expect_eq "$code" 200 "a dead letter retried over HTTP"
for _ in $(seq 100); do [ "$(grep -c "dead-lettered" "$ERRF")" -ge 2 ] && break; sleep 0.05; done
"$WQRUN" retry --db "$TMP/ops.db" mail user-7 >/dev/null 2>&1
for _ in $(seq 100); do [ "$(grep -c "dead-lettered" "$ERRF")" -ge 3 ] && break; sleep 0.05; done
expect_eq "$(grep -c "wqrun: mail: 'user-7' retried (dead letter re-queued)" "$ERRF")" 2 \
    "the retry is logged the same way over HTTP and from the command line"
"$WQRUN" purge-dead --db "$TMP/ops.db" mail >/dev/null 2>&1
for _ in $(seq 100); do grep -q "purged" "$ERRF" && break; sleep 0.05; done
expect_in "$(cat "$ERRF")" "wqrun: mail: 1 dead letter(s) purged" "a purge is logged"
kill -TERM "$PID"
wait "$PID" 2>/dev/null

# ------------------------------------------------ WQRUN_* variables
OUT=$(WQRUN_LOG_FORMAT=json WQRUN_QUIET=yes "$WQRUN" --db "$TMP/e.db" "$FAILS" 2>&1 >/dev/null)
expect_not_in "$OUT" "started" "WQRUN_QUIET=yes is --quiet (no start-up line)"
expect_in "$OUT" '"level":"error"' "WQRUN_LOG_FORMAT=json is --log-format json"
OUT=$(WQRUN_LOG_FORMAT=json "$WQRUN" --log-format text --db "$TMP/f.db" "$FAILS" 2>&1 >/dev/null)
expect_not_in "$OUT" '"level"' "the command line wins over the environment"
OUT=$(WQRUN_SERVE=perhaps "$WQRUN" "$FAILS" 2>&1)
expect_in "$OUT" "WQRUN_SERVE takes 1, true, yes, 0, false or no, got 'perhaps'" "a bad flag variable is named"
OUT=$(WQRUN_GRACE=-3 "$WQRUN" "$FAILS" 2>&1)
expect_in "$OUT" "--grace needs seconds >= 0, got '-3'" "a bad variable gets the option's message"
expect_in "$OUT" "(from the environment variable WQRUN_GRACE)" "and names the variable"
for v in DB LISTEN TOKEN GRACE SYNC LOG_FORMAT LOG_LEVEL SERVE QUIET; do
    case $("$WQRUN" --help) in *"WQRUN_$v"*) pass ;; *) fail "--help does not list WQRUN_$v" ;; esac
done

# ------------------------------------------------ a database URL's password is never logged
DB=$(pg_fresh_db)
secret_url=$(printf '%s' "$DB" | sed 's|postgresql://postgres@|postgresql://postgres:s3cret-pw@|')
run --db "$secret_url" "$FAILS"
expect_rc 3 "a run on PostgreSQL with a password in the URL (dead-letters its key: 3)"
expect_in "$ERR" "postgresql://postgres:***@" "the start-up line shows the URL with the password hidden"
expect_not_in "$ERR" "s3cret-pw" "the password appears nowhere in the log"

# ------------------------------------------------ PostgreSQL: adds during one runner's drain
# The database keeps the item for the runners that share it: the stopping runner answers 202
# after the commit and claims nothing more; the other runner runs it.
DB=$(pg_fresh_db)
PA=$((PORT + 2))
pg_bg pa --serve --db "$DB" --listen "127.0.0.1:$PA" "$SLOW" first
A=$BG_PID
for _ in $(seq 150); do [ "$(curl -s -m 1 "http://127.0.0.1:$PA/healthz")" = ok ] && break; sleep 0.05; done
for _ in $(seq 100); do grep -q "ran slow-1" "$TMP/pa.out" && break
    [ "$(pg_psql "$DB" "SELECT count(*) FROM wqrun.jobs WHERE key = 'slow-1' AND running")" = 1 ] && break; sleep 0.05; done
kill -TERM "$A"
wait_for "$TMP/pa.err" "finishing running handlers" 1 10 || fail "no drain after SIGTERM: $(cat "$TMP/pa.err")"
body=$(curl -s -m 5 -w ' %{http_code}' -d '{"key":"pg-posted","priority":4}' "http://127.0.0.1:$PA/queues/jobs/items")
expect_eq "$body" '{"queued":true} 202' "PostgreSQL: an add to a draining runner is accepted after its commit"
expect_eq "$(pg_psql "$DB" "SELECT priority || ' ' || running FROM wqrun.jobs WHERE key = 'pg-posted'")" "4 false" \
    "psql reads it in the database at once, with its priority, not claimed"
body=$(curl -s -m 5 -w ' %{http_code}' -d '{"key":"pg-posted","unique":true}' "http://127.0.0.1:$PA/queues/jobs/items")
expect_eq "$body" '{"queued":false,"reason":"pending"} 202' "a unique add during the drain is decided by the database"
wait_exit "$A" 10
expect_eq "$RC" 0 "the PostgreSQL runner's drain ends normally"
expect_not_in "$(cat "$TMP/pa.out")" "ran pg-posted" "the stopping runner did not run it"
pg_bg pb --db "$DB" "$SLOW"
wait_exit "$BG_PID" 20
expect_in "$(cat "$TMP/pb.out")" "ran pg-posted" "another runner on the database runs it"
expect_eq "$(pg_psql "$DB" "SELECT count(*) FROM wqrun.jobs")" 0 "nothing is left"

finish
