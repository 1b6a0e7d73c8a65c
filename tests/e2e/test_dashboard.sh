#!/usr/bin/env bash
# The dashboard (GET /, web/dashboard.html) in a real browser: headless
# Chromium from Debian's packages driven by python3-selenium
# (tests/e2e/dashboard.py), against two real `wqrun --serve --db --listen`
# runners of tests/e2e/lua/dashboard.lua, one of them with --token. The
# browser's checks are compared with the HTTP API; see dashboard.py.
# Not skipped when the browser is missing: scripts/deps.sh installs it.
# WQ_DASHBOARD_SHOTS=DIR keeps screenshots (overview, phone, a failure).
. "$(dirname "$0")/lib.sh"

PY=/usr/bin/python3 # Debian's, which sees python3-selenium
for f in "$PY" /usr/bin/chromium /usr/bin/chromedriver; do
    if [ ! -x "$f" ]; then
        fail "$f is missing: run scripts/deps.sh (chromium chromium-driver python3-selenium)"
        finish
    fi
done
if ! "$PY" -c 'import selenium' 2>/dev/null; then
    fail "python3-selenium is missing: run scripts/deps.sh"
    finish
fi

LUA=$WQ_SOURCE_DIR/tests/e2e/lua/dashboard.lua
TOKEN='s3cret-t0ken'

# ---- the page over plain HTTP --------------------------------------------------
listen_start -- --serve --db "$TMP/a.db" "$LUA" || finish
A_BASE=$BASE
headers=$(curl -s -D - -o "$TMP/page.html" "$A_BASE/")
expect_re "$headers" '^HTTP/1.1 200' "GET / answers 200"
expect_re "$headers" '^Content-Type: text/html; charset=utf-8' "GET / is text/html"
expect_re "$headers" '^Cache-Control: no-cache' "GET / is revalidated (Cache-Control: no-cache)"
etag=$(printf '%s' "$headers" | tr -d '\r' | sed -n 's/^ETag: //p')
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' -H "If-None-Match: $etag" "$A_BASE/")" 304 \
    "GET / with its ETag answers 304"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$A_BASE/")" 405 "POST / answers 405"
size=$(wc -c <"$TMP/page.html")
expect_between "$size" 1000 65536 "the page is small (bytes)"
expect_eq "$(cmp -s "$TMP/page.html" "$WQ_SOURCE_DIR/web/dashboard.html" && echo same)" same \
    "GET / serves web/dashboard.html byte for byte"
expect_not_in "$(grep -Eio '(src|href)="(https?:)?//[^"]*' "$TMP/page.html")" "/" \
    "the page references no external asset"

# ---- the routes the page reads for a queue's schedules and held-back groups ----
# mail (tests/e2e/lua/dashboard.lua): groups of concurrency 1, acme with 5 items
# (1 runs, 4 held), globex with 2 (1 runs, 1 held); schedules digest and beat.
J='import json,sys; d=json.load(sys.stdin)'
code() { curl -s -o "$TMP/body" -w '%{http_code}' "$@"; }
for i in $(seq 50); do
    G=$(curl -s "$A_BASE/queues/mail/groups" | python3 -c "$J"'; print(d["total"], *["%s:%d/%d/%d/%s" % (g["group"], g["held"], g["queued"], g["running"], g["concurrency"]) for g in d["groups"]])' 2>/dev/null)
    [ "$G" = "2 acme:4/4/1/1 globex:1/1/1/1" ] && break
    sleep 0.1
done
expect_eq "$G" "2 acme:4/4/1/1 globex:1/1/1/1" \
    "GET /queues/mail/groups: total, then group:held/queued/running/concurrency, most held first"
expect_eq "$(curl -s "$A_BASE/queues/mail/groups?limit=1" | python3 -c "$J"'; print(d["total"], [g["group"] for g in d["groups"]], d["groups"][0]["own"], d["groups"][0]["rate"])')" \
    "2 ['acme'] False None" "?limit=1: the most held group only, the total still 2; no own limit, no rate (null)"
expect_eq "$(curl -s "$A_BASE/queues/mail" | python3 -c "$J"'; print(d["throttled"])')" 5 \
    "GET /queues/mail: throttled is the sum of the groups' held items"
expect_eq "$(curl -s "$A_BASE/queues/idle/groups")" '{"groups":[],"total":0}' "a queue without groups: none held"
for q in 'limit=0' 'limit=101' 'limit=x' 'limit=' 'top=3' 'limit=5&limit=6'; do
    expect_eq "$(code "$A_BASE/queues/mail/groups?$q")" 400 "groups?$q answers 400"
    expect_in "$(cat "$TMP/body")" 'limit, an integer from 1 to 100' "groups?$q says why"
done
expect_eq "$(code "$A_BASE/queues/nope/groups")" 404 "groups of an unknown queue: 404"
expect_in "$(cat "$TMP/body")" "no such queue 'nope'" "the 404 names the queue"
expect_eq "$(code -X POST "$A_BASE/queues/mail/groups")" 405 "POST groups: 405"

S=$(curl -s "$A_BASE/queues/mail/schedules")
NOW=$(date +%s)
expect_eq "$(printf '%s' "$S" | python3 -c "$J"'
for s in d["schedules"]:
    print(s["name"], s["spec"], s["key"], s["tz"], s["catch_up"], s["payload"], s["defined"])')" \
    "beat @every 1s beat utc once None True
digest */5 * * * * daily-digest utc once None True" "GET /queues/mail/schedules: by name, with spec, key, tz, catch_up, payload, defined"
NEXT=$(printf '%s' "$S" | python3 -c "$J"'; print("%d" % [s for s in d["schedules"] if s["name"] == "digest"][0]["next_at"])')
expect_between "$((NEXT - NOW))" 0 300 "digest's next_at is within the next 5 minutes"
expect_eq "$((NEXT % 300))" 0 "digest's next_at is on a multiple of 5 minutes"
for i in $(seq 50); do
    L=$(curl -s "$A_BASE/queues/mail/schedules" | python3 -c "$J"'; print([s["last_at"] for s in d["schedules"] if s["name"] == "beat"][0] is not None)')
    [ "$L" = True ] && break
    sleep 0.1
done
expect_eq "$L" True "beat (@every 1s) has a last_at once it fired"
expect_eq "$(curl -s "$A_BASE/queues/idle/schedules")" '{"schedules":[]}' "a queue without schedules: an empty list"
expect_eq "$(code "$A_BASE/queues/mail/schedules?limit=3")" 400 "schedules?limit=3 answers 400"
expect_in "$(cat "$TMP/body")" "takes no parameter" "schedules?... says why"
expect_eq "$(code "$A_BASE/queues/nope/schedules")" 404 "schedules of an unknown queue: 404"
expect_in "$(cat "$TMP/body")" "no such queue 'nope'" "the 404 names the queue"
expect_eq "$(code -X DELETE "$A_BASE/queues/mail/schedules")" 405 "DELETE schedules: 405"

# A schedule the state file holds but the script no longer defines: listed, "defined": false.
OLD=$(script old.lua <<'EOF'
wq.queue("mail"):schedule("old", "@hourly", {key = "old-report"})
EOF
)
run --db "$TMP/b.db" "$OLD"
expect_eq "$RC" 0 "a one-shot script leaves schedule 'old' in b.db"
listen_start -- --serve --db "$TMP/b.db" --token "$TOKEN" "$LUA" || finish
B_BASE=$BASE
expect_eq "$(curl -s -H "Authorization: Bearer $TOKEN" "$B_BASE/queues/mail/schedules" | python3 -c "$J"'
for s in d["schedules"]:
    print(s["name"], s["key"], s["defined"])')" "beat beat True
digest daily-digest True
old old-report False" "schedules: 'old', restored from the file but not defined by the script, is listed with defined false"
for r in schedules groups; do
    expect_eq "$(code "$B_BASE/queues/mail/$r")" 401 "with --token, GET /queues/mail/$r without it: 401"
    expect_eq "$(code -H "Authorization: Bearer $TOKEN" "$B_BASE/queues/mail/$r")" 200 \
        "with --token, GET /queues/mail/$r with it: 200"
done
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' "$B_BASE/")" 200 \
    "with --token, GET / loads without the token"

shots=${WQ_DASHBOARD_SHOTS:-}
[ -n "$shots" ] && mkdir -p "$shots"
# Its own process group, so that nothing of the browser outlives the test.
setsid "$PY" "$WQ_SOURCE_DIR/tests/e2e/dashboard.py" "$A_BASE" "$B_BASE" "$TOKEN" ${shots:+"$shots"} &
DPID=$!
PIDS+=("-$DPID")
wait_exit "$DPID" 120
kill -9 -- "-$DPID" 2>/dev/null
expect_eq "$RC" 0 "the dashboard in headless Chromium (tests/e2e/dashboard.py; its output is above)"

finish
