#!/usr/bin/env bash
# Every failed handler run is logged (issue 18): one line per failed attempt
# with the queue, the key, the attempt, the first line of the error (cut to
# 200 bytes) and what follows: "next try in N s", or "dead-lettered" on the
# last one (max_retries reached, or wq.fail). --quiet leaves out the lines of
# runs that will be tried again; a dead letter is logged all the same.
. "$(dirname "$0")/lib.sh"

jobs=$(script jobs.lua <<'LUA'
local long = string.rep("z", 500) .. "\ntail of the long one"
local q = wq.queue("jobs", {workers = 1, max_retries = 2,
    limiter = wq.limiter.exponential(0.01, 0.01),
    handler = function(key, payload, job)
        if key == "flaky" then
            if job.attempt < 3 then
                error("connection refused\n  second line of flaky", 0)
            end
        elseif key == "doomed" then
            error(long, 0)
        elseif key == "final" then
            return wq.fail("404 not found")
        end
    end})
q:add("flaky")
q:add("doomed")
q:add("final")
LUA
)

run "$jobs"
expect_rc 3 "the run (two keys dead-lettered: exit 3)"
expect_in "$ERR" "wqrun: jobs: 'flaky' failed (attempt 1), next try in 0.01 s: connection refused" \
    "flaky's first failure: attempt, delay, first line of the error"
expect_in "$ERR" "wqrun: jobs: 'flaky' failed (attempt 2), next try in 0.01 s: connection refused" \
    "and its second"
expect_count "$ERR" "'flaky' failed" 2 "flaky failed twice, then succeeded"
expect_not_in "$ERR" "second line of flaky" "only the first line of an error is logged"
expect_count "$ERR" "'doomed' failed (attempt" 2 "doomed: two lines for its retried runs"
expect_in "$ERR" "wqrun: jobs: 'doomed' failed 3 times, dead-lettered: zzz" \
    "doomed's third failure: dead-lettered"
msg=$(printf '%s\n' "$ERR" | sed -n "s/.*'doomed' failed 3 times, dead-lettered: //p")
expect_eq "${#msg}" 200 "a long error is cut to 200 bytes"
expect_eq "${msg: -4}" "z..." "ending in ..."
expect_not_in "$ERR" "tail of the long one" "its second line is not logged"
expect_in "$ERR" "wqrun: jobs: 'final' failed for good (wq.fail, attempt 1), dead-lettered: 404 not found" \
    "wq.fail: dead-lettered at once"
expect_count "$ERR" " failed" 6 "one line per failed attempt: 2 + 3 + 1"
# Levels (docs/deploy.md): a retried failure warns, a dead letter is an error whatever made it dead.
expect_count "$ERR" "WARN wqrun: jobs: '" 4 "the four retried failures are WARN lines"
expect_in "$ERR" "ERROR wqrun: jobs: 'doomed' failed 3 times, dead-lettered" "retries exhausted: an ERROR line"
expect_in "$ERR" "ERROR wqrun: jobs: 'final' failed for good (wq.fail" "wq.fail: an ERROR line too"

run --quiet "$jobs"
expect_rc 3 "the run with --quiet"
expect_not_in "$ERR" "next try" "--quiet: no line for a run that will be tried again"
expect_count "$ERR" "dead-lettered:" 2 "--quiet: the dead letters are logged all the same"
expect_count "$ERR" " failed" 2 "--quiet: two lines in all"

finish
