-- PostgreSQL restart test (tests/e2e/test_pg_restart.sh): queue "q" (8
-- workers) fed over HTTP; every run appends "run KEY TIME" to the log arg[1].
local log = assert(io.open(arg[1], "a"))
wq.queue("q", {
    workers = 8,
    handler = function(key)
        log:write(string.format("run %s %.3f\n", key, wq.time()))
        log:flush()
        wq.sleep(0.01)
    end,
})
