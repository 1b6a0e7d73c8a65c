#!/usr/bin/env bash
# job:progress is told at most once a second per job (SPEC 11, docs/lua-api.md), on both
# backends. A handler calls it 100 times in about half a second, then gives a final value and
# runs on: GET /events carries at most floor(span) + 2 progress events for it before its done
# (span: the seconds from its first call to its last; 2 here: the first value at once, the
# final one at the end of that second), a second or more apart, the last the final value; and
# its row's progress is written as few times: the state file's items row (counted by an SQLite
# trigger the test adds to the file) and PostgreSQL's wqrun.jobs row (counted by a trigger the
# test adds in its own database). Without the limit it would be 101 of each.
. "$(dirname "$0")/lib.sh"
pg_need
command -v sqlite3 >/dev/null || { echo "FAIL: needs sqlite3" >&2; exit 1; }

jobs=$(script jobs.lua <<'LUA'
wq.queue("work", {handler = function(key, payload, job)
    local t0 = wq.now()
    for i = 1, 100 do
        job:progress(i)
        wq.sleep(0.005)
    end
    job:progress({final = true})
    local span = wq.now() - t0
    wq.sleep(1.5) -- the final value is told at the end of its second: the run lasts till then
    return {span = span}
end})
LUA
)

# events FILE KEY: the progress events told for KEY before its done, as
# "COUNT BOUND LAST MIN-GAP" (BOUND: floor(span) + 2, the most the limit allows; MIN-GAP: the
# shortest time between two of them, in seconds, or - for fewer than two), then "after N" (the
# progress events after the done: 0)
events() {
    python3 - "$1" "$2" <<'PY'
import json, math, sys
evs = [json.loads(l[6:]) for l in open(sys.argv[1]) if l.startswith("data: ")]
evs = [e for e in evs if e.get("key") == sys.argv[2]]
kinds = [e["event"] for e in evs]
if "done" not in kinds:
    print("no done event:", kinds)
    sys.exit()
d = kinds.index("done")
prog = [e for e in evs[:d] if e["event"] == "progress"]
gaps = [b["at"] - a["at"] for a, b in zip(prog, prog[1:])]
last = json.dumps(prog[-1]["progress"], separators=(",", ":")) if prog else "-"
print(len(prog), math.floor(evs[d]["result"]["span"]) + 2, last,
      "%.3f" % min(gaps) if gaps else "-")
print("after", sum(e["event"] == "progress" for e in evs[d:]))
PY
}

# run_one DB: a runner on DB (a state file or a PostgreSQL URL) runs key p1 with its events
# read by curl into $TMP/ev.sse; stopped once p1 is done. Sets EV (what events says) and BOUND.
run_one() {
    listen_start -- --serve --db "$1" "$jobs"
    curl -sN "$BASE/events?queue=work" >"$TMP/ev.sse" 2>/dev/null &
    local sse=$!
    PIDS+=("$sse")
    wait_for "$TMP/ev.sse" ": wqrun events" 1 5 || fail "the stream did not start"
    curl -s -X POST "$BASE/queues/work/items" -d '{"key": "p1"}' >/dev/null
    wait_for "$TMP/ev.sse" '"event":"done","queue":"work","key":"p1"' 1 20 || fail "no done event for p1"
    kill "$sse" 2>/dev/null
    kill -TERM "$PID"
    wait_exit "$PID" 10
    expect_eq "$RC" 0 "the runner stops cleanly"
    EV=$(events "$TMP/ev.sse" p1)
    BOUND=$(awk 'NR == 1 { print $2 }' <<<"$EV")
}

# check_events WHAT: the checks on EV
check_events() {
    local n last gap
    read -r n _ last gap <<<"$(head -1 <<<"$EV")"
    expect_between "$n" 2 "$BOUND" "$1: progress events before done (at most floor(span) + 2 = $BOUND; got: $EV)"
    expect_eq "$last" '{"final":true}' "$1: the last progress event is the final value"
    expect_between "$gap" 0.9 1000 "$1: progress events a second or more apart (seconds)"
    expect_eq "$(tail -1 <<<"$EV")" "after 0" "$1: no progress event after done"
}

# ---- the state file ----
run --db "$TMP/s.db" "$jobs" # makes the file (nothing to do: exits)
expect_rc 0 "the state file made"
sqlite3 "$TMP/s.db" "CREATE TABLE progress_writes(id INTEGER PRIMARY KEY, key TEXT, value TEXT);
CREATE TRIGGER count_progress AFTER UPDATE OF progress ON items
BEGIN INSERT INTO progress_writes(key, value) VALUES (new.key, new.progress); END;" ||
    fail "could not add the trigger to the state file"
run_one "$TMP/s.db"
check_events "state file"
writes=$(sqlite3 "$TMP/s.db" "SELECT count(*) FROM progress_writes WHERE key = 'p1' AND value IS NOT NULL")
expect_between "$writes" 2 "$BOUND" "state file: items.progress written at most floor(span) + 2 = $BOUND times"
expect_eq "$(sqlite3 "$TMP/s.db" "SELECT value FROM progress_writes WHERE key = 'p1' AND value IS NOT NULL ORDER BY id DESC LIMIT 1")" \
    '{"final":true}' "state file: the last value written is the final one"

# ---- PostgreSQL ----
DB=$(pg_fresh_db)
run --db "$DB" "$jobs" # makes the schema (nothing to do: exits)
expect_rc 0 "the schema made"
pg_psql "$DB" "CREATE TABLE public.progress_writes(id serial PRIMARY KEY, key text, value jsonb);
CREATE FUNCTION public.count_progress() RETURNS trigger LANGUAGE plpgsql AS \$\$
BEGIN INSERT INTO public.progress_writes(key, value) VALUES (NEW.key, NEW.progress); RETURN NULL; END \$\$;
CREATE TRIGGER count_progress AFTER UPDATE OF progress ON wqrun.jobs
FOR EACH ROW EXECUTE FUNCTION public.count_progress();" >/dev/null ||
    fail "could not add the trigger to wqrun.jobs"
run_one "$DB"
check_events "PostgreSQL"
writes=$(pg_psql "$DB" "SELECT count(*) FROM public.progress_writes WHERE key = 'p1' AND value IS NOT NULL")
expect_between "$writes" 2 "$BOUND" "PostgreSQL: jobs.progress written at most floor(span) + 2 = $BOUND times"
expect_eq "$(pg_psql "$DB" "SELECT value::text FROM public.progress_writes WHERE key = 'p1' AND value IS NOT NULL ORDER BY id DESC LIMIT 1")" \
    '{"final": true}' "PostgreSQL: the last value written is the final one"

finish
