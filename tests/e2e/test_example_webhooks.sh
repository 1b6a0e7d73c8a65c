#!/usr/bin/env bash
# examples/webhooks.lua does what its header promises, end to end: 52
# events posted to the runner's own HTTP API are delivered with wq.http to
# the receiver it starts (examples/webhook_receiver.py), signed (the
# receiver checks every signature), at most 2 at once and 5 per second per
# customer, 429s retried after their Retry-After and 500s with backoff,
# 410s dead-lettered at once, and an event posted again is not delivered
# twice (keep_done). And examples/crawler.lua fetches with wq.http: it runs
# with no curl (no PATH at all).
. "$(dirname "$0")/lib.sh"

command -v python3 >/dev/null || { echo "FAIL: needs python3 (the example's receiver)" >&2; exit 1; }
command -v curl >/dev/null || { echo "FAIL: needs curl" >&2; exit 1; }
EX=$E2E_DIR/../../examples

for try in 1 2 3 4 5; do # another port when that one is taken
    PORT=$(rand_port)
    RPORT=$((PORT + 1))
    run --listen "127.0.0.1:$PORT" "$EX/webhooks.lua" "http://127.0.0.1:$PORT" "$RPORT"
    case $ERR in *"cannot listen"* | *"did not start on port"*) continue ;; esac
    break
done
expect_rc 0 "the webhooks example runs to the end"
expect_in "$OUT" "52 events, 52 of them posted over HTTP" "every event came in over the HTTP API"
line() { printf '%s\n' "$OUT" | awk -v c="$1" '$1 == c'; }
field() { line "$1" | awk -v n="$2" '{ print $n }'; }
# "acme      20 delivered, 20 attempts, at most 2 at once, peak 5.0/s"
expect_eq "$(field acme 2) $(field acme 4)" "20 20" "acme: 20 delivered in 20 attempts"
expect_eq "$(field globex 2)" 20 "globex: all 20 delivered despite its 429s"
expect_between "$(field globex 4)" 25 40 "globex: every third attempt got a 429 and was tried again"
expect_eq "$(field initech 2) $(field initech 4)" "10 20" "initech: each event delivered on its second attempt (after a 500)"
expect_eq "$(field umbrella 2) $(field umbrella 4)" "0 2" "umbrella: 410 is not retried"
for c in acme globex initech; do
    expect_between "$(field $c 8)" 1 2 "$c: never more than 2 deliveries at once (group concurrency)"
    # 10 attempts at least 0.2 s apart take 1.8 s; the receiver's clock adds a little noise
    expect_between "$(field $c 12 | tr -d /s)" 1 5.3 "$c: at most 5 attempts per second (group rate 5/s)"
done
expect_in "$OUT" "bad signatures: 0" "every body was signed with the shared secret"
expect_in "$OUT" "events delivered twice: 0" "no event reached its endpoint twice"
expect_eq "$(printf '%s\n' "$OUT" | grep -c '^dead letter evt-05[12] after 1 attempt(s): HTTP 410')" 2 \
    "the two umbrella events are dead letters after one attempt"
expect_in "$OUT" 'posting evt-001 again: HTTP 202 {"queued":false,"reason":"done"}' \
    "an event delivered within keep_done is not queued again"
expect_in "$ERR" "dead-lettered: HTTP 410" "the dead letters are logged"

# The crawler needs no curl: no PATH at all, against a runner's HTTP server as two hosts.
listen_start -- --serve "$E2E_DIR/lua/http_serve.lua"
{
    for i in 1 2 3; do echo "http://127.0.0.1:$PORT/healthz?i=$i"; done
    for i in 1 2 3; do echo "http://localhost:$PORT/queues?i=$i"; done
    echo "http://127.0.0.1:$PORT/no-such-page"
} >"$TMP/urls.txt"
OUT=$(timeout -s KILL 60 env PATH=/nonexistent "$WQRUN" "$EX/crawler.lua" "@$TMP/urls.txt" 2>"$TMP/err" </dev/null)
RC=$? ERR=$(cat "$TMP/err") LAST_CMD="PATH=/nonexistent wqrun crawler.lua @urls.txt"
expect_rc 0 "the crawler runs without curl"
expect_in "$OUT" "fetched 6 pages" "it fetched every page"
expect_re "$OUT" "127.0.0.1 +3 pages" "three from one host"
expect_re "$OUT" "localhost +3 pages" "three from the other"
expect_in "$OUT" "1 URLs failed for good, e.g. http://127.0.0.1:$PORT/no-such-page: HTTP 404" \
    "a 404 is a permanent failure"
kill -TERM "$PID"
wait "$PID" 2>/dev/null

finish
