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

listen_start -- --serve --db "$TMP/b.db" --token "$TOKEN" "$LUA" || finish
B_BASE=$BASE
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
