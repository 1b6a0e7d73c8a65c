-- A job that kills its runner (tests/e2e/test_pg_takeover.sh): queue "kill";
-- each run appends "run KEY ATTEMPT TIME" to the log arg[1]; the key "bomb"
-- then kill -9s the wqrun process running it (the parent of the sh it
-- starts), any other key succeeds.
local log = assert(io.open(arg[1], "a"))
wq.queue("kill", {
    handler = function(key, payload, job)
        log:write(string.format("run %s %d %.3f\n", key, job.attempt, wq.time()))
        log:flush()
        if key == "bomb" then
            wq.exec({"sh", "-c", "kill -9 $PPID"})
            wq.sleep(30)
        end
    end,
})
