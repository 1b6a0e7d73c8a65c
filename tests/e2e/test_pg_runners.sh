#!/usr/bin/env bash
# The multi-runner model test (SPEC 8.2, 8.3): 3 runners (--lease 3) share
# one database and queue "m"; 20 keys get 600 adds from three kinds of producers (two of each) at
# once: `wqrun add` (CLI, some payloads fail once), psql `select
# wqrun.add(...)`, and psql delayed adds `wqrun.add(q, k, null, 0.2)`. Every
# ~2.5 s one runner is killed with kill -9 and a new one started (5 kills).
# The handler logs each start and end (runner, key, per-process run number,
# time). Once the queue is drained, a checker proves from the logs and the
# producers' records:
#   (a) no key ran twice at overlapping times, unless the earlier run's
#       runner was killed (a declared-dead takeover);
#   (b) every acknowledged add ran after it was sent (a delayed one that
#       set the ready time no earlier than 0.2 s after, unless the run going
#       on failed and its retry came earlier: earliest wins), to completion;
#   (c) every add answered "follow-up" came while a run of the key went on,
#       and a run began after that run ended (the follow-up rule);
# plus: every run on a runner that was not killed ended; nothing is left.
. "$(dirname "$0")/lib.sh"
pg_need
command -v python3 >/dev/null || pg_abort "python3 is needed for the checker"

LUA=$E2E_DIR/lua/pg_runners.lua
DB=$(pg_fresh_db)
run migrate --db "$DB"
expect_rc 0 "migrate"
LOGS=$TMP/logs
mkdir -p "$LOGS"
KILLS=$TMP/kills
: >"$KILLS"

declare -A RPID
start_runner() { # start_runner NAME
    pg_bg "$1" --quiet --serve --runner-name "$1" --lease 3 --db "$DB" "$LUA" "$LOGS/$1.log" "$1"
    RPID[$1]=$BG_PID
}
for r in r1 r2 r3; do start_runner "$r"; done
check "3 runners registered" pg_wait "$DB" "select count(*) from wqrun.runners" 3 15

# Producers: "KIND KEY RC SENT ANSWERED OUTPUT" per add in $TMP/acks.KIND*
prod_cli() {
    local i k p t0 out rc
    for ((i = 0; i < 100; i++)); do
        k=k$((RANDOM % 20))
        p="{\"n\":$i}"
        ((RANDOM % 10 == 0)) && p='{"fail":true}'
        t0=$(date +%s.%N)
        out=$("$WQRUN" add --db "$DB" m "$k" "$p" 2>&1)
        rc=$?
        echo "cli $k $rc $t0 $(date +%s.%N) $out" >>"$TMP/acks.cli$1"
        sleep 0.0$((RANDOM % 5))
    done
}
prod_sql() { # prod_sql KIND AFTER N
    local i k t0 out rc after=$2
    for ((i = 0; i < 100; i++)); do
        k=k$((RANDOM % 20))
        t0=$(date +%s.%N)
        out=$(pg_psql "$DB" "select wqrun.add('m', '$k', null, $after)" 2>&1)
        rc=$?
        echo "$1 $k $rc $t0 $(date +%s.%N) $out" >>"$TMP/acks.$1$3"
        sleep 0.0$((RANDOM % 5))
    done
}
t_begin=$(now)
# two of each kind at once, 100 adds each
prods=()
for n in 1 2; do
    prod_cli "$n" &
    prods+=($!)
    prod_sql sql null "$n" &
    prods+=($!)
    prod_sql delayed 0.2 "$n" &
    prods+=($!)
done
PIDS+=("${prods[@]}")

# Kills: every ~2.5 s one live runner, replaced by a new one.
live=(r1 r2 r3)
next=4
for ((kill_n = 1; kill_n <= 5; kill_n++)); do
    sleep 2.$((RANDOM % 10))
    i=$((RANDOM % ${#live[@]}))
    victim=${live[$i]}
    echo "$victim $(date +%s.%N)" >>"$KILLS"
    kill -9 "${RPID[$victim]}"
    wait "${RPID[$victim]}" 2>/dev/null
    live=("${live[@]:0:$i}" "${live[@]:$((i + 1))}" "r$next")
    start_runner "r$next"
    next=$((next + 1))
done
wait "${prods[@]}"
t_prod=$(since "$t_begin")

pg_wait "$DB" "select count(*) from wqrun.jobs" 0 20
# (Before bbef053 a follow-up run's outcome could be lost: its row stayed
# 'processing' on a live runner, so the queue never drained until that
# runner stopped; what the stopping runners hand back then runs on rD below.)
stuck=$(pg_psql "$DB" "select count(*) from wqrun.jobs")
expect_eq "$stuck" 0 "nothing left while the runners still run ($(pg_psql "$DB" "select string_agg(key || ':' || state || ':' || dirty, ' ') from wqrun.items"))"
# The killed runners reaped and the last one started registered, before the live ones stop
# (a runner killed moments before the others stop is left for the next runner to reap).
check "the killed runners were reaped" pg_wait "$DB" "select count(*) from wqrun.runners" "${#live[@]}" 10
for r in "${live[@]}"; do kill -TERM "${RPID[$r]}"; done
for r in "${live[@]}"; do
    wait_exit "${RPID[$r]}" 15
    LAST_CMD="runner $r (SIGTERM)" ERR=$(tail -5 "$TMP/$r.err")
    expect_rc 0 "runner $r exits 0 on SIGTERM"
done
if [ "$stuck" != 0 ]; then
    # What the stopped runners handed back runs on one more runner.
    start_runner rD
    check "the rest drains on rD" pg_wait "$DB" "select count(*) from wqrun.jobs" 0 20
    kill -TERM "${RPID[rD]}"
    wait_exit "${RPID[rD]}" 15
    live+=(rD)
fi
expect_eq "$(pg_psql "$DB" "select count(*) from wqrun.jobs")|$(pg_psql "$DB" "select count(*) from wqrun.dead")" "0|0" \
    "nothing left, no dead letter"
expect_eq "$(pg_psql "$DB" "select count(*) from wqrun.runners")" 0 "every runner left or was reaped"
takeovers=$(pg_psql "$DB" "select value from wqrun.counters where name = 'takeovers'")

cat "$TMP"/acks.* >"$TMP/acks"
cat "$LOGS"/*.log >"$TMP/runs"
OUT=$(python3 - "$TMP/runs" "$TMP/acks" "$KILLS" <<'PY'
import sys, collections
runs_f, acks_f, kills_f = sys.argv[1:4]
killed = {l.split()[0]: float(l.split()[1]) for l in open(kills_f) if l.strip()}
starts, ends = {}, {}
for l in open(runs_f):
    f = l.split()
    if len(f) < 6:
        continue
    rid = (f[1], int(f[3]))
    if f[0] == "S":
        starts[rid] = (f[2], float(f[5]))
    elif f[0] == "E":
        ends[rid] = (float(f[5]), f[6])
bad = []
phantom = []  # follow-up answers while no handler ran the key
runs = collections.defaultdict(list)  # key -> [(start, end or None, runner, ok)]
failed = collections.defaultdict(list)  # key -> ends of runs that failed (then retried)
cut = 0  # runs cut short by a kill: they ran until the kill
for rid, (key, s) in starts.items():
    e = ends.get(rid)
    end = e[0] if e else killed.get(rid[0], float("inf"))
    runs[key].append((s, end, rid[0], bool(e and e[1] == "ok")))
    if e and e[1] == "err":
        failed[key].append(e[0])
    if e is None:
        if rid[0] in killed:
            cut += 1
        else:
            bad.append("run %s/%d of %s never ended, its runner was not killed" % (rid[0], rid[1], key))
for v in runs.values():
    v.sort()
# (a) exclusivity: a run cut by a kill lasted until the kill (its takeover
# can only start after it: the runner's session lock goes with the process)
overlaps = 0
for key, v in runs.items():
    for i in range(len(v)):
        s1, e1, r1, _ = v[i]
        for j in range(i + 1, len(v)):
            s2 = v[j][0]
            if s2 >= e1:
                break
            overlaps += 1
            bad.append("(a) %s ran on %s from %.6f to %.6f and on %s from %.6f" % (key, r1, s1, e1, v[j][2], s2))
# (b) every acknowledged add ran (to completion) after it was sent
acks = ok_acks = said_followup = followup_ran = 0
outs = collections.Counter()
for l in open(acks_f):
    f = l.split(None, 5)
    kind, key, rc, t0, t1 = f[0], f[1], f[2], float(f[3]), float(f[4])
    out = f[5].strip() if len(f) > 5 else ""
    if rc != "0":
        bad.append("add failed: %s" % l.strip())
        continue
    acks += 1
    outs[out] += 1
    # a delayed add that set the ready time runs no earlier; one deduplicated
    # against an earlier ready time (earliest wins) runs at that time
    lo = t0 + (0.2 - 0.005 if kind == "delayed" and out == "delayed" else 0)
    if any(s >= lo and ok for s, e, r, ok in runs.get(key, [])):
        ok_acks += 1
    elif lo > t0 and any(t0 - 0.1 <= fe <= t0 + 0.2 and any(s >= fe and ok for s, e, r, ok in runs[key])
                         for fe in failed.get(key, [])):
        # the run going on failed and its retry (10 ms later) set an earlier ready time:
        # earliest wins (WORKQUEUE.md), so the key ran once, at the retry, to completion
        ok_acks += 1
    else:
        bad.append("(b) %s add of %s sent at %.6f (%s) never ran to completion after it" % (kind, key, t0, out))
    # (c) an add answered follow-up: a run overlapped the call, and a run began after it ended.
    # In the database a key is processing from its claim (just before its handler starts)
    # until its outcome commits (just after the handler ends): SLACK allows for both.
    if out == "follow-up":
        said_followup += 1
        SLACK = 0.5
        during = [(s, e) for s, e, r, ok in runs.get(key, []) if s < t1 + SLACK and e > t0 - SLACK]
        if not during:
            phantom.append("%s add of %s at %.6f-%.6f said follow-up, but no run of it was going on" % (kind, key, t0, t1))
        elif any(s2 >= e and s2 >= t0 and ok2 for s, e in during for s2, _, _, ok2 in runs[key]):
            followup_ran += 1
        else:
            bad.append("(c) %s add of %s at %.6f said follow-up; no run began after the one going on ended" % (kind, key, t0))
print("runs=%d ended=%d cut_by_kills=%d keys=%d acks=%d ran_after_ack=%d overlaps=%d said_follow_up=%d followed_up=%d outcomes=%s"
      % (len(starts), len(ends), cut, len(runs), acks, ok_acks, overlaps, said_followup, followup_ran,
         ",".join("%s:%d" % kv for kv in sorted(outs.items()))))
for b in bad[:20]:
    print("BAD " + b)
for b in phantom[:5]:
    print("PHANTOM " + b)
print("bad=%d phantom_follow_ups=%d" % (len(bad), len(phantom)))
PY
)
RC=$?
LAST_CMD="the checker"
ERR=""
expect_rc 0 "the checker ran"
echo "$OUT" | grep -v '^BAD \|^PHANTOM ' 
expect_eq "$(echo "$OUT" | grep '^BAD ' | head -20)" "" "the checker found no violation"
# (Rows stuck 'processing' with no handler running them made adds answer
# follow-up while no run of the key was going on.)
expect_eq "$(echo "$OUT" | grep '^PHANTOM ' | head -5)" "" "every add answered follow-up came while a run of its key was going on"
expect_re "$OUT" ' acks=600 ' "600 adds were acknowledged"
expect_re "$OUT" ' ran_after_ack=600 ' "(b) all 600 ran after they were sent"
expect_re "$OUT" ' overlaps=0 ' "(a) no overlapping runs (a run cut by a kill lasts until the kill)"
check "(c) at least 2 adds answered follow-up ($(echo "$OUT" | grep -o 'said_follow_up=[0-9]*'))" \
    [ "$(echo "$OUT" | sed -n 's/.* said_follow_up=\([0-9]*\) .*/\1/p')" -ge 2 ]
expect_re "$OUT" 'outcomes=.*follow-up:' "some adds answered follow-up"
expect_eq "$(wc -l <"$KILLS")" 5 "5 kills"
expect_between "$takeovers" 0 100000 "takeovers counted"
echo "runners: producers took ${t_prod}s; kills: $(awk '{ printf "%s ", $1 }' "$KILLS"); takeovers: $takeovers; stuck rows before the stop: $stuck"
finish
