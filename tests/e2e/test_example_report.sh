#!/usr/bin/env bash
# examples/report.lua (a flow: a splitter, a part per file, a join) as the README runs it:
# on its demo directory with the embedded default (one part dead for good, the flaky ones
# retried, the report written once with every other file); again with a state file, where a
# second run over the same directory adds nothing twice; and with two runners sharing a
# PostgreSQL database, the join running exactly once for both.
. "$(dirname "$0")/lib.sh"
pg_need
EX=$E2E_DIR/../../examples

# ---------------------------------------------------- the demo directory, in memory
run "$EX/report.lua"
expect_rc 3 "the demo run exits 3 (a part is dead-lettered on purpose)"
DEMO=$(printf '%s\n' "$ERR" | sed -n 's/.*a demo directory of 50 files in \(.*\)$/\1/p')
check "the demo directory was made" test -d "$DEMO"
REPORT=$DEMO.report.txt
check "the report was written" test -f "$REPORT"
expect_eq "$(head -1 "$REPORT")" "report of $DEMO: 50 files, 1 missing" "the report's head: 50 parts, 1 missing"
expect_eq "$(grep -c '^flaky-' "$REPORT")" 8 "every flaky file is in the report"
expect_eq "$(grep '^flaky-' "$REPORT" | grep -c '(attempt 2)')" 8 "each after its retry"
expect_in "$(cat "$REPORT")" "broken-13.txt: cannot read broken-13.txt: simulated disk error" \
    "the broken file is listed as missing, with its error"
expect_eq "$(grep -c 'written to' <<<"$ERR")" 1 "the join ran once"
want_lines=$(cat "$DEMO"/*.txt | grep -v -c '^$' || true)
broken_lines=$(wc -l <"$DEMO/broken-13.txt")
expect_re "$(grep '^total' "$REPORT")" "^total +$((want_lines - broken_lines)) " \
    "the total counts every line of the files that were read"
rm -rf "$DEMO" "$REPORT"

# ---------------------------------------------------- a state file: a second run adds nothing
DIR=$TMP/files
mkdir -p "$DIR"
for i in $(seq 20); do seq "$i" >"$DIR/f$i.txt"; done
run --db "$TMP/report.db" "$EX/report.lua" "$DIR" "$TMP/r1.txt"
expect_rc 0 "a run with a state file"
expect_eq "$(head -1 "$TMP/r1.txt")" "report of $DIR: 20 files, 0 missing" "its report"
expect_eq "$(sqlite3 "$TMP/report.db" "SELECT state, count(*) FROM flow_nodes GROUP BY state")" "done|22" \
    "the state file: 20 parts, the splitter and the join, all done"
run --db "$TMP/report.db" "$EX/report.lua" "$DIR" "$TMP/r2.txt"
expect_rc 0 "the same run again"
check "the second run wrote no report (nothing was added twice)" test ! -e "$TMP/r2.txt"
expect_eq "$(sqlite3 "$TMP/report.db" "SELECT count(*) FROM flow_nodes")" 22 "no node was added twice"
run flows --db "$TMP/report.db"
expect_re "$OUT" "^report:$DIR +finished +22 +0 +0 +22 +0 " "wqrun flows lists the finished flow"

# ---------------------------------------------------- two runners on PostgreSQL
DB=$(pg_fresh_db)
run migrate --db "$DB"
pg_bg r1 --db "$DB" "$EX/report.lua" "$DIR" "$TMP/pg.txt"
A=$BG_PID
pg_bg r2 --db "$DB" "$EX/report.lua" "$DIR" "$TMP/pg.txt"
B=$BG_PID
wait_exit "$A" 60
expect_eq "$RC" 0 "the first runner exits 0"
wait_exit "$B" 60
expect_eq "$RC" 0 "the second runner exits 0"
expect_eq "$(head -1 "$TMP/pg.txt")" "report of $DIR: 20 files, 0 missing" "the report from PostgreSQL"
expect_eq "$(cat "$TMP"/r1.err "$TMP"/r2.err 2>/dev/null | grep -c 'written to')" 1 \
    "the join ran exactly once for both runners"
expect_eq "$(pg_psql "$DB" "select state, count(*) from wqrun.flow_nodes group by state")" "done|22" \
    "the database: every node done"
finish
