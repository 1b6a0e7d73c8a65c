#!/usr/bin/env bash
# The remote-worker examples (SPEC 10.2, docs/workers.md): examples/remote.lua
# served on a state file and on PostgreSQL, its "thumbs" worked off by each
# of the three example workers in turn — Python (examples/remote_worker.py
# on contrib/python/wqrun_worker.py), Node.js (remote_worker.js) and bash with
# curl (remote_worker.sh): every photo gets its thumbnail size as its result
# (read back through GET items/KEY), "huge.jpg" is retried once, "broken.jpg"
# is dead-lettered at once; the history (sqlite3 / psql) shows the six runs.
. "$(dirname "$0")/lib.sh"
command -v node >/dev/null || { fail "needs node (nodejs)"; finish; }
EX=$WQ_SOURCE_DIR/examples

one() { # one LANG DB
    listen_start -- --serve --db "$2" "$EX/remote.lua" || return
    case $1 in
    python) python3 "$EX/remote_worker.py" "$BASE" >"$TMP/w.out" 2>&1 & ;;
    node) node "$EX/remote_worker.js" "$BASE" >"$TMP/w.out" 2>&1 & ;;
    bash) bash "$EX/remote_worker.sh" "$BASE" >"$TMP/w.out" 2>&1 & ;;
    esac
    local w=$! i
    PIDS+=("$w")
    for i in $(seq 300); do
        [ "$(curl -s "$BASE/queues/thumbs" | sed -n 's/.*"succeeded":\([0-9]*\).*/\1/p')" = 5 ] &&
            [ "$(curl -s "$BASE/queues/thumbs/items/broken.jpg" | sed -n 's/.*"state":"\([a-z]*\)".*/\1/p')" = dead ] && break
        sleep 0.1
    done
    item() { curl -s "$BASE/queues/thumbs/items/$1" | python3 -c 'import json,sys; d=json.load(sys.stdin); r=d.get("result") or {}; print(d["state"], json.dumps({k: r.get(k) for k in ("h", "w")}))'; }
    expect_eq "$(item cat.jpg) $(item dog.jpg) $(item pano.jpg) $(item icon.png)" \
        'done {"h": 192, "w": 256} done {"h": 256, "w": 192} done {"h": 43, "w": 256} done {"h": 64, "w": 64}' \
        "$1 on $3: each photo's thumbnail size is in its result"
    expect_eq "$(item huge.jpg)" 'done {"h": 171, "w": 256}' "$1 on $3: the huge one, after its retry"
    expect_in "$(curl -s "$BASE/queues/thumbs/dead")" '"key":"broken.jpg"' "$1 on $3: the broken one is a dead letter"
    kill -TERM "$w"
    wait_exit "$w" 15
    kill -TERM "$PID"
    wait_exit "$PID" 15
    expect_eq "$RC" 0 "$1 on $3: the runner stops cleanly"
}

for lang in python node bash; do
    one "$lang" "$TMP/$lang.db" "a state file"
    expect_eq "$(sqlite3 "$TMP/$lang.db" "SELECT state, count(*), max(attempts) FROM history GROUP BY state ORDER BY state")" \
"dead|1|1
done|5|2" "$lang: the history in the file (sqlite3): 5 done (one on its 2nd attempt), 1 dead"
done
pg_need
for lang in python node bash; do
    DB=$(pg_fresh_db)
    one "$lang" "$DB" "PostgreSQL"
    expect_eq "$(pg_psql "$DB" "SELECT state || ' ' || count(*) || ' ' || max(attempts) FROM wqrun.history GROUP BY state ORDER BY state")" \
"dead 1 1
done 5 2" "$lang: the history in the database (psql)"
done
finish
