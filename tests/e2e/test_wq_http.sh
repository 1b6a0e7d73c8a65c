#!/usr/bin/env bash
# wq.http from Lua against a real server (tests/e2e/http_server.py): every
# option, keep-alive reuse, TLS verification, a proxy from the environment,
# a handler's timeout and q:cancel aborting a transfer at once (the server
# sees the close; during a slow name lookup too), an endless body stopped at
# max_body with bounded RSS, and a thousand requests to a server that never
# answers timing out and freeing everything. The assertions run in the Lua scripts (tests/e2e/lua/http_*.lua,
# exit status 1 on a failed check); the server's side is checked here too.
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || {
    fail "python3 is needed for the test server"
    finish
}
command -v openssl >/dev/null || {
    fail "openssl is needed for the test server's certificate (scripts/deps.sh)"
    finish
}

python3 "$E2E_DIR/http_server.py" "$TMP" >"$TMP/server.out" 2>"$TMP/server.err" &
PIDS+=($!)
for _ in $(seq 200); do
    [ -f "$TMP/ports.json" ] && break
    sleep 0.05
done
if [ ! -f "$TMP/ports.json" ]; then
    fail "the test server did not start: $(cat "$TMP/server.err")"
    finish
fi
port() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$TMP/ports.json" "$1"; }
WQ_HTTP_PORT=$(port http)
WQ_HTTPS_PORT=$(port https)
WQ_NEVER_PORT=$(port never)
WQ_FULL_PORT=$(port full)
export WQ_HTTP_PORT WQ_HTTPS_PORT WQ_NEVER_PORT WQ_FULL_PORT
# A proxy the tests did not ask for would change what the server sees.
unset http_proxy https_proxy HTTPS_PROXY all_proxy ALL_PROXY no_proxy NO_PROXY
SRV=http://127.0.0.1:$WQ_HTTP_PORT

# events ID FIELD: what the server recorded for ID
events() {
    curl -s -m 5 "$SRV/events?id=$1" | python3 -c 'import json, sys; print(json.load(sys.stdin).get(sys.argv[1], ""))' "$2"
}

# The options, the response, failures, TLS, keep-alive, digests.
run --quiet "$E2E_DIR/lua/http_basic.lua"
expect_rc 0 "http_basic.lua"
expect_in "$OUT" "checks passed" "http_basic.lua finished"
conns=$(printf '%s\n' "$OUT" | sed -n 's/^keep-alive: 100 requests on \([0-9]*\) new connection.*/\1/p')
echo "keep-alive: 100 sequential requests used ${conns:-?} new connection(s)"
expect_between "${conns:-99}" 0 2 "100 sequential requests on at most 2 connections"

# A handler's timeout and q:cancel abort the transfer.
run --quiet "$E2E_DIR/lua/http_abort.lua"
expect_rc 0 "http_abort.lua"
expect_in "$OUT" "checks passed" "http_abort.lua finished"
expect_in "$ERR" "'k' failed 1 time, dead-lettered: timeout" "the handler failed with its timeout"
expect_in "$ERR" "cancel: 'k' cancelled" "the job was cancelled"
printf '%s\n' "$OUT" | grep -E '^(timeout|cancel):'
# (Lua compared the times; here: closed long before the requests' 30 s timeout.)
deadline=$(events deadline closed_after)
expect_between "${deadline:-99}" 0 1.5 "the server saw the connection closed at the handler's 1 s timeout"
cancel=$(events cancel closed_after)
expect_between "${cancel:-99}" 0 1 "the server saw the connection closed at the cancel (0.3 s)"

# An endless body with max_body = 1 MiB; endless header lines.
run --quiet "$E2E_DIR/lua/http_endless.lua"
expect_rc 0 "http_endless.lua"
expect_in "$OUT" "checks passed" "http_endless.lua finished"
printf '%s\n' "$OUT" | grep '^endless'
expect_re "$(events endless closed_after)" '^[0-9.]+$' "the server saw the endless transfer closed"
expect_re "$(events headers closed_after)" '^[0-9.]+$' "the server saw the endless headers closed"

# A thousand requests to a server that never answers.
# Under ASan a small quarantine, so that freed memory is reused (RSS is compared).
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=4 run --quiet "$E2E_DIR/lua/http_many.lua" 1000
expect_rc 0 "http_many.lua"
expect_in "$OUT" "checks passed" "http_many.lua finished"
for round in first second third; do
    n=$(printf '%s\n' "$OUT" | sed -n "s/^$round: \([0-9]*\) x http: GET URL: [A-Za-z]* timed out after N milliseconds.*/\1/p" |
        awk '{ s += $1 } END { print s + 0 }')
    expect_eq "$n" 1000 "all 1000 requests of the $round round timed out"
done
printf '%s\n' "$OUT" | grep '^many:'
expect_between "$ELAPSED" 3 40 "three rounds of 1000 one-second timeouts"

# Stopping a transfer during a slow name lookup (tests/e2e/slowdns.c,
# preloaded) neither waits for the lookup nor stalls the loop.
if cc -shared -fPIC -o "$TMP/slowdns.so" "$E2E_DIR/slowdns.c" -ldl 2>"$TMP/cc.err"; then
    # ASan wants to come first among the libraries; the preloaded one is harmless before it.
    LD_PRELOAD=$TMP/slowdns.so ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0 \
        run --quiet "$E2E_DIR/lua/http_dns.lua"
    expect_rc 0 "http_dns.lua"
    expect_in "$OUT" "checks passed" "http_dns.lua finished"
    printf '%s\n' "$OUT" | grep '^dns:'
else
    fail "cannot build tests/e2e/slowdns.c: $(cat "$TMP/cc.err")"
fi

# A proxy from the environment (libcurl reads http_proxy and no_proxy).
http_proxy=$SRV no_proxy=localhost run --quiet "$E2E_DIR/lua/http_proxy.lua"
expect_rc 0 "http_proxy.lua"
expect_in "$OUT" "checks passed" "http_proxy.lua finished"

# Without the proxy the .invalid host does not resolve: the proxy was used above.
cat >"$TMP/noproxy.lua" <<'EOF'
local r, err = wq.http({url = "http://through-proxy.invalid/some/path"})
print(r and "answered" or err)
EOF
run --quiet "$TMP/noproxy.lua"
expect_rc 0 "a request without a proxy"
expect_in "$OUT" "http: GET http://through-proxy.invalid/some/path: " "fails on its own"

# The server is still there (it was not what failed).
expect_eq "$(curl -s -m 5 "$SRV/status/200")" "status 200" "the test server answers at the end"

finish
