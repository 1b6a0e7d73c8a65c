#!/usr/bin/env bash
# docs/postgres.md "Getting a database", as written: a role that owns the
# database runs wqrun (the schema made by its first start), and a producer
# role with only the grants the doc lists enqueues from SQL.
. "$(dirname "$0")/lib.sh"
pg_need
ADMIN=$(pg_fresh_db)
db=$(basename "$ADMIN")
owner=r_own_$$
app=r_app_$$
pg_psql "$ADMIN" "CREATE ROLE $owner LOGIN" >/dev/null
pg_psql "$ADMIN" "CREATE ROLE $app LOGIN" >/dev/null
pg_psql "$ADMIN" "CREATE DATABASE ${db}_j OWNER $owner" >/dev/null
OWN=${ADMIN%/*}/${db}_j
OWN=${OWN/postgres@/$owner@}
APP=${OWN/$owner@/$app@}

jobs=$(script jobs.lua <<'LUA'
local q = wq.queue("mail", {handler = function(key) print("ran " .. key) end})
q:add("from-owner")
LUA
)
run --db "$OWN" "$jobs"
expect_rc 0 "the owner role runs wqrun (the first start makes the schema)"
expect_in "$OUT" "ran from-owner" "and runs a job"
# the producer's grants as the doc gives them (role app), read from it so the two cannot drift
grants=$(python3 - "$(dirname "$0")/../../docs/postgres.md" <<'PY'
import re, sys
m = re.search(r"`(GRANT USAGE ON SCHEMA wqrun TO app;.*?TO app)`", open(sys.argv[1]).read(), re.S)
print(" ".join(m.group(1).split()) if m else "")
PY
)
check "docs/postgres.md gives the producer's grants ($grants)" test -n "$grants"
pg_psql "$OWN" "${grants//TO app/TO $app}" >/dev/null
expect_eq "$(pg_psql "$APP" "select wqrun.add('mail', 'from-app', '{\"to\":\"ada\"}')" 2>&1)" queued \
    "the producer role with the documented grants enqueues from SQL"
expect_eq "$(pg_psql "$APP" "select wqrun.add_many('[{\"queue\":\"mail\",\"key\":\"batch\"}]')" 2>&1)" '["queued"]' \
    "and in bulk"
run --db "$OWN" "$jobs"
expect_in "$OUT" "ran from-app" "the runner runs what the producer added"
expect_in "$OUT" "ran batch" "both"
# (the cluster is the run's own; the database and roles go with it, dropped here anyway)
pg_psql "$ADMIN" "DROP DATABASE ${db}_j" >/dev/null
pg_psql "$ADMIN" "DROP ROLE $owner" >/dev/null
pg_psql "$ADMIN" "DROP ROLE $app" >/dev/null
finish
