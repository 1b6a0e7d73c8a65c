#!/usr/bin/env bash
# The PostgreSQL kill -9 loop (issue 16; the SQLite one is test_crash.sh):
# 3 runners (--serve --lease 3, each with --listen on its own 127.0.0.1
# port) share one database and queue "c"; 30 times, about 1 s apart, a
# random runner is killed with kill -9 and a replacement started. All the
# while three producers add unique keys (so "acknowledged" means "must run
# at least once after it was sent"):
#   - HTTP: curl POST /queues/c/items and /queues/c/items:batch to a random
#     live runner (sometimes one just killed); acknowledged: 202, and for a
#     batch each result {"queued":true|false}; a refused connection, a reset
#     or a 503 is not;
#   - `wqrun add --db URL c KEY`: acknowledged: exit 0;
#   - psql `select wqrun.add('c', KEY)`: acknowledged: psql exit 0 (the
#     statement committed).
# The handler (lua/pg_crashloop.lua) logs each run's start and end (key,
# runner, wq.time()) to a per-runner log, flushed per line, and sleeps
# 0-20 ms (300-600 ms for keys ending in 0). Then the producers stop, the fleet drains (wqrun.jobs empty),
# the runners get SIGTERM, and a checker proves from the logs:
#   - every acknowledged add started at or after it was sent (less a 2 ms
#     clock slack) and some run of it ended: 0 lost;
#   - no key ran on two runners at overlapping times: a run cut by a kill
#     (no end line) counts as lasting until the kill;
#   - every extra run of a key (keys are unique: one run each is the rule)
#     follows a run on a runner killed after that run started (and less
#     than 3 s, the lease, after it ended): duplicates come from kills only;
#     the re-run starts within 3 s of the kill (SPEC 8.3 says 2 s);
#   - no key ran that nobody sent; wqrun.dead, wqrun.jobs and
#     wqrun.runners are empty; every runner exits 0 on SIGTERM; no runner
#     died by itself.
# It prints the counts: adds acknowledged per producer, runs, duplicates.
. "$(dirname "$0")/lib.sh"
export LC_ALL=C # '.' in $EPOCHREALTIME
pg_need
command -v python3 >/dev/null || pg_abort "python3 is needed for the checker"
command -v curl >/dev/null || pg_abort "curl is needed for the HTTP producer"

N_KILLS=30
LUA=$E2E_DIR/lua/pg_crashloop.lua
T_BEGIN=$EPOCHREALTIME
DB=$(pg_fresh_db)
run migrate --db "$DB"
expect_rc 0 "migrate"
LOGS=$TMP/logs
mkdir -p "$LOGS"
KILLS=$TMP/kills # "RUNNER TIME" per kill, TIME taken just before kill -9
LIVE=$TMP/live   # "RUNNER PORT" per live runner, for the HTTP producer
STOP=$TMP/stop
: >"$KILLS"
: >"$LIVE"

declare -A RPID RPORT
# start_runner NAME: starts a runner on a free port (another one when it is
# taken) and waits (up to 10 s) until /healthz answers.
start_runner() {
    local name=$1 try i port
    for try in 1 2 3 4 5 6; do
        port=$(rand_port)
        pg_bg "$name" --quiet --serve --lease 3 --runner-name "$name" --listen "127.0.0.1:$port" \
            --db "$DB" "$LUA" "$LOGS/$name.log" "$name"
        for ((i = 0; i < 200; i++)); do
            kill -0 "$BG_PID" 2>/dev/null || break
            if [ "$(curl -s -m 1 "http://127.0.0.1:$port/healthz")" = ok ] &&
                listens_on "$BG_PID" "$port"; then
                RPID[$name]=$BG_PID
                RPORT[$name]=$port
                return 0
            fi
            sleep 0.05
        done
        kill -9 "$BG_PID" 2>/dev/null
        wait "$BG_PID" 2>/dev/null
        grep -q "cannot listen" "$TMP/$name.err" || break
    done
    fail "runner $name did not start: $(tail -5 "$TMP/$name.err")"
    return 1
}
write_live() {
    local r
    for r in "${live[@]}"; do echo "$r ${RPORT[$r]}"; done >"$LIVE.new"
    mv -f "$LIVE.new" "$LIVE"
}

live=()
for r in r1 r2 r3; do start_runner "$r" && live+=("$r"); done
write_live
check "3 runners registered" pg_wait "$DB" "select count(*) from wqrun.runners" 3 15

# Producers, until $STOP exists (bounded: HTTP at most 30000 keys, the others
# 4000 adds each). They record
# one line per request in $TMP/acks.KIND:
#   http SENT ANSWERED CODE single|batch KEY,KEY... BODY
#   cli|sql SENT ANSWERED RC KEY OUTPUT
prod_http() {
    local i=0 n j keys body url code t0 port lines
    while [ ! -e "$STOP" ] && ((i < 30000)); do
        mapfile -t lines <"$LIVE"
        if ((${#lines[@]} == 0)); then
            sleep 0.05
            continue
        fi
        port=${lines[RANDOM % ${#lines[@]}]#* }
        if ((RANDOM % 2 == 0)); then
            n=$((RANDOM % 39 + 2))
            keys="" body="["
            for ((j = 0; j < n; j++, i++)); do
                keys+="${keys:+,}h$i"
                ((j)) && body+=","
                body+="{\"key\":\"h$i\",\"payload\":{\"n\":$i}}"
            done
            body+="]"
            url=/queues/c/items:batch
            kind=batch
        else
            keys=h$i
            body="{\"key\":\"h$i\"}"
            i=$((i + 1))
            url=/queues/c/items
            kind=single
        fi
        t0=$EPOCHREALTIME
        code=$(curl -s -m 5 -o "$TMP/http.body" -w '%{http_code}' -H 'Content-Type: application/json' \
            --data-binary "$body" "http://127.0.0.1:$port$url" 2>/dev/null)
        [ -n "$code" ] || code=000
        [ "$code" = 000 ] && : >"$TMP/http.body"
        echo "http $t0 $EPOCHREALTIME $code $kind $keys $(tr -d '\n' <"$TMP/http.body")" >>"$TMP/acks.http"
        sleep 0.0$((RANDOM % 3 + 1))
    done
}
prod_cli() {
    local i out rc t0
    for ((i = 0; i < 4000; i++)); do
        [ -e "$STOP" ] && break
        t0=$EPOCHREALTIME
        out=$(timeout -s KILL 15 "$WQRUN" add --db "$DB" c "a$i" 2>&1)
        rc=$?
        echo "cli $t0 $EPOCHREALTIME $rc a$i $(echo $out)" >>"$TMP/acks.cli"
        sleep 0.0$((RANDOM % 3 + 1))
    done
}
PSQL=psql
[ -x "${WQ_PG_BIN:-}/psql" ] && PSQL=$WQ_PG_BIN/psql
prod_sql() {
    local i out rc t0
    for ((i = 0; i < 4000; i++)); do
        [ -e "$STOP" ] && break
        t0=$EPOCHREALTIME
        out=$(timeout -s KILL 15 "$PSQL" -X -A -t -v ON_ERROR_STOP=1 "$DB" -c "select wqrun.add('c', 's$i')" 2>&1)
        rc=$?
        echo "sql $t0 $EPOCHREALTIME $rc s$i $(echo $out)" >>"$TMP/acks.sql"
        sleep 0.0$((RANDOM % 3 + 1))
    done
}
: >"$TMP/acks.http"
: >"$TMP/acks.cli"
: >"$TMP/acks.sql"
prods=()
prod_http &
prods+=($!)
prod_cli &
prods+=($!)
prod_sql &
prods+=($!)
PIDS+=("${prods[@]}")

# The loop: every ~1 s a random live runner gets kill -9, then a replacement
# starts (r4, r5, ...). A runner found dead before its kill crashed.
T_LOOP=$EPOCHREALTIME
next=4
crashed=""
for ((k = 1; k <= N_KILLS; k++)); do
    sleep 0.$((RANDOM % 4 + 6))
    for r in "${live[@]}"; do
        kill -0 "${RPID[$r]}" 2>/dev/null || crashed+=" $r"
    done
    i=$((RANDOM % ${#live[@]}))
    victim=${live[$i]}
    echo "$victim $EPOCHREALTIME" >>"$KILLS"
    kill -9 "${RPID[$victim]}"
    wait "${RPID[$victim]}" 2>/dev/null
    live=("${live[@]:0:$i}" "${live[@]:$((i + 1))}")
    write_live
    if start_runner "r$next"; then
        live+=("r$next")
        write_live
    fi
    next=$((next + 1))
done
T_LOOP=$(awk -v a="$T_LOOP" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
touch "$STOP"
for p in "${prods[@]}"; do
    wait_exit "$p" 20
    LAST_CMD="producer $p" ERR=""
    expect_rc 0 "a producer stops within 20 s of the stop"
done
for r in "${live[@]}"; do
    kill -0 "${RPID[$r]}" 2>/dev/null || crashed+=" $r"
done
expect_eq "$crashed" "" "no runner died without being killed ($(for r in $crashed; do echo "$r: $(tail -3 "$TMP/$r.err")"; done))"
expect_eq "$(wc -l <"$KILLS" | tr -d ' ')" "$N_KILLS" "$N_KILLS kills"
expect_eq "${#live[@]}" 3 "3 runners live at the end"

T_DRAIN=$EPOCHREALTIME
if pg_wait "$DB" "select count(*) from wqrun.jobs" 0 20; then
    pass
else
    fail "the queue did not drain within 20 s while 3 runners ran: $PG_GOT left ($(pg_psql "$DB" "select string_agg(key || ':' || state, ' ') from (select * from wqrun.items limit 10) i"))"
fi
T_DRAIN=$(awk -v a="$T_DRAIN" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
for r in "${live[@]}"; do kill -TERM "${RPID[$r]}"; done
for r in "${live[@]}"; do
    wait_exit "${RPID[$r]}" 15
    LAST_CMD="runner $r (SIGTERM)" ERR=$(tail -5 "$TMP/$r.err")
    expect_rc 0 "runner $r exits 0 on SIGTERM"
done
expect_eq "$(pg_psql "$DB" "select count(*) from wqrun.jobs")|$(pg_psql "$DB" "select count(*) from wqrun.dead")" "0|0" \
    "nothing left in wqrun.jobs, wqrun.dead is empty ($(pg_psql "$DB" "select string_agg(key || ': ' || error, '; ') from (select * from wqrun.dead limit 5) d"))"
expect_eq "$(pg_psql "$DB" "select count(*) from wqrun.runners")" 0 "every runner left or was reaped"
takeovers=$(pg_psql "$DB" "select value from wqrun.counters where name = 'takeovers'")

# The runners' stderr: what they said (besides the SIGTERM notice), and no
# sanitizer report, failed assertion or Lua error.
said=$(cat "$TMP"/r*.err | grep -v "SIGTERM received" | sed 's/^[0-9-]* [0-9:.]* //; s/[0-9][0-9]*/N/g' | sort | uniq -c)
[ -n "$said" ] && echo "the runners said (counts; numbers as N):" && echo "$said"
expect_eq "$(cat "$TMP"/r*.err | grep -iE 'sanitizer|runtime error|assert|segmentation|traceback|lua error|panic' | head -5)" "" \
    "no runner reported a crash, a failed assertion or a Lua error"
cat "$LOGS"/*.log >"$TMP/runs"
cat "$TMP/acks.http" "$TMP/acks.cli" "$TMP/acks.sql" >"$TMP/acks"
OUT=$(python3 - "$TMP/runs" "$TMP/acks" "$KILLS" <<'PY'
import sys, json, collections
runs_f, acks_f, kills_f = sys.argv[1:4]
SLACK = 0.002  # one clock (CLOCK_REALTIME) on one machine; %.6f rounding
kills = {}
for l in open(kills_f):
    f = l.split()
    if f:
        kills[f[0]] = float(f[1])
starts, ends = {}, {}
for l in open(runs_f):
    f = l.split()
    if len(f) != 5 or f[0] not in "SE":
        print("BAD malformed log line: %r" % l)
        continue
    rid = (f[1], int(f[3]))
    (starts if f[0] == "S" else ends)[rid] = (f[2], float(f[4]))
bad = []
KILL_SLACK = 0.05  # a runner goes on for a moment after the time taken just before its kill -9
runs = collections.defaultdict(list)  # key -> [(start, end, runner, ended)]
cut = 0
for rid, (key, s) in starts.items():
    e = ends.get(rid)
    if e:
        end = e[1]
    elif rid[0] in kills:
        # cut by the kill: it lasted until then. The time is taken just before kill -9, and
        # the runner goes on until the signal lands: a run may start a moment after it.
        end = max(kills[rid[0]], s)
        cut += 1
        if kills[rid[0]] + KILL_SLACK < s:
            bad.append("run %s/%d of %s started at %.6f, after its runner's kill at %.6f" % (rid[0], rid[1], key, s, kills[rid[0]]))
    else:
        end = float("inf")
        bad.append("run %s/%d of %s never ended, and its runner was not killed" % (rid[0], rid[1], key))
    runs[key].append((s, end, rid[0], e is not None))
for rid in ends:
    if rid not in starts:
        bad.append("run %s/%d ended without a start" % rid)
for v in runs.values():
    v.sort()

# Acknowledged adds, per producer.
acked = {}  # key -> (producer, sent)
sent_keys = set()
stats = collections.Counter()
codes = collections.Counter()
for l in open(acks_f):
    f = l.rstrip("\n").split(" ", 6)
    prod, t0, t1 = f[0], float(f[1]), float(f[2])
    if prod == "http":
        code, kind, keys = f[3], f[4], f[5].split(",")
        body = f[6] if len(f) > 6 else ""
        sent_keys.update(keys)
        codes[code] += 1
        stats["http_sent"] += len(keys)
        if code != "202":
            if code not in ("000", "503"):
                bad.append("HTTP %s (neither 202, 503 nor no answer) for %s: %s" % (code, kind, body[:200]))
            continue
        try:
            doc = json.loads(body)
            results = [doc] if kind == "single" else doc["results"]
            assert len(results) == len(keys)
        except Exception as ex:
            bad.append("HTTP 202 with an unexpected body for %s (%s): %r" % (",".join(keys), ex, body[:200]))
            continue
        for k, r in zip(keys, results):
            if r.get("queued") is True or r.get("queued") is False:
                acked[k] = ("http", t0, t1)
                stats["http_queued_%s" % str(r["queued"]).lower()] += 1
            else:
                stats["http_item_refused"] += 1
                bad.append("HTTP 202 refused item %s: %r" % (k, r))
    else:
        rc, key = f[3], f[4]
        out = f[5] if len(f) > 5 else ""
        sent_keys.add(key)
        stats[prod + "_sent"] += 1
        if rc == "0":
            acked[key] = (prod, t0, t1)
            stats[prod + "_out_" + (out or "-").replace(" ", "_")] += 1
        else:
            stats[prod + "_failed"] += 1
            bad.append("%s add of %s failed (status %s): %s" % (prod, key, rc, out[:200]))

per = collections.Counter(a[0] for a in acked.values())
lost = unfinished = 0
for key, (prod, t0, _) in sorted(acked.items()):
    mine = runs.get(key, [])
    if not any(s >= t0 - SLACK for s, _, _, _ in mine):
        lost += 1
        bad.append("LOST: %s add of %s acknowledged (sent at %.6f) never started after it (runs: %s)"
                   % (prod, key, t0, mine))
    elif not any(ended and s >= t0 - SLACK for s, _, _, ended in mine):
        unfinished += 1
        bad.append("UNFINISHED: %s add of %s (sent at %.6f) never ran to its end: %s" % (prod, key, t0, mine))
for key, mine in runs.items():
    if key not in sent_keys:
        bad.append("%s ran but no producer sent it" % key)
    elif key in acked and mine[0][0] < acked[key][1] - SLACK:
        bad.append("%s started at %.6f, before it was sent at %.6f" % (key, mine[0][0], acked[key][1]))

# Exclusivity, and duplicates explained by kills.
overlaps = dups = unexplained = 0
max_rerun = 0.0  # kill -> the re-run's start
max_unwritten = 0.0  # a run's end -> its runner's kill, when it ran again
for key, v in runs.items():
    for j in range(1, len(v)):
        s1, e1, r1, ended1 = v[j - 1]
        s2, _, r2, _ = v[j]
        for s0, e0, r0, _ in v[:j]:
            if s2 < e0:
                overlaps += 1
                bad.append("OVERLAP: %s ran on %s from %.6f to %.6f and on %s from %.6f" % (key, r0, s0, e0, r2, s2))
        dups += 1
        k = kills.get(r1)
        # (KILL_SLACK: the kill's time is taken just before kill -9 lands)
        if k is None or k + KILL_SLACK < s1 or s2 < k or (ended1 and k - e1 >= 3.0):
            unexplained += 1
            bad.append("DUPLICATE: %s ran again on %s at %.6f after a run on %s %.6f-%.6f%s (its runner %s)"
                       % (key, r2, s2, r1, s1, e1, "" if ended1 else " (no end)",
                          "was killed at %.6f" % k if k is not None else "was not killed"))
            continue
        max_rerun = max(max_rerun, s2 - k)
        if ended1:
            max_unwritten = max(max_unwritten, k - e1)
        if s2 - k > 3.0:
            bad.append("SLOW TAKEOVER: %s ran again %.3f s after its runner %s was killed" % (key, s2 - k, r1))

print("acked=%d http=%d cli=%d sql=%d" % (len(acked), per["http"], per["cli"], per["sql"]))
print("sent: http=%d cli=%d sql=%d; http answers: %s; not acknowledged: http=%d cli=%d sql=%d"
      % (stats["http_sent"], stats["cli_sent"], stats["sql_sent"],
         ",".join("%s:%d" % kv for kv in sorted(codes.items())),
         stats["http_sent"] - per["http"], stats["cli_sent"] - per["cli"], stats["sql_sent"] - per["sql"]))
print("outcomes: %s" % ",".join("%s:%d" % kv for kv in sorted(stats.items()) if "_out_" in kv[0] or "queued" in kv[0]))
print("runs=%d ended=%d cut_by_kills=%d keys_run=%d dups=%d unexplained_dups=%d overlaps=%d lost=%d unfinished=%d"
      % (len(starts), len(ends), cut, len(runs), dups, unexplained, overlaps, lost, unfinished))
# (legitimate: the commit comes before the answer; said to show the checker
# measures from the send)
early = sum(1 for key, (_, _, t1) in acked.items() if runs.get(key) and runs[key][0][0] < t1)
print("max_rerun_after_kill=%.3fs max_end_to_kill_of_a_rerun=%.3fs started_before_their_ack_arrived=%d"
      % (max_rerun, max_unwritten, early))
for b in bad[:25]:
    print("BAD " + b)
print("bad=%d" % len(bad))
PY
)
RC=$?
LAST_CMD="the checker" ERR=""
expect_rc 0 "the checker ran"
CHK=$OUT
OUT="(the checker's report is above)"
echo "$CHK" | grep -v '^BAD '
val() { echo "$CHK" | grep -o " $1=[0-9]*\|^$1=[0-9]*" | head -1 | sed 's/.*=//'; }
expect_eq "$(echo "$CHK" | grep '^BAD ' | head -25)" "" "the checker found no violation"
expect_eq "$(val lost)" 0 "0 acknowledged adds lost"
expect_eq "$(val unfinished)" 0 "every acknowledged add ran to its end"
expect_eq "$(val overlaps)" 0 "no key ran on two runners at overlapping times (a run cut by a kill lasts until the kill)"
expect_eq "$(val unexplained_dups)" 0 "every duplicate run follows a run its runner's kill cut (or left unwritten)"
# Enough traffic that the kills hit adds and runs (on a loaded 2-core machine
# a run gets about 2000 HTTP, 180 CLI and 200 SQL adds acknowledged).
check "HTTP acknowledged >= 200 adds ($(val http))" [ "$(val http)" -ge 200 ]
check "wqrun add acknowledged >= 50 adds ($(val cli))" [ "$(val cli)" -ge 50 ]
check "SQL acknowledged >= 50 adds ($(val sql))" [ "$(val sql)" -ge 50 ]
check "the kills cut running handlers: at least 3 runs cut ($(val cut_by_kills))" [ "$(val cut_by_kills)" -ge 3 ]
check "takeovers counted ($takeovers) >= runs cut by kills ($(val cut_by_kills))" [ "${takeovers:-0}" -ge "$(val cut_by_kills)" ]
check "the runs cover every acknowledged add ($(val runs) runs, $(val acked) acked)" [ "$(val keys_run)" -ge "$(val acked)" ]
T_ALL=$(awk -v a="$T_BEGIN" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
echo "pg crash loop: $N_KILLS kills in ${T_LOOP}s ($(cut -d' ' -f1 "$KILLS" | paste -sd' ' -)); drained in ${T_DRAIN}s; takeovers counted: $takeovers; test took ${T_ALL}s"
finish
