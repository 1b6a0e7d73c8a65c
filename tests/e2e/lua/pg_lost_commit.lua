-- Transactions lost at commit (tests/e2e/test_pg_lost_commit.sh). arg[1] the log
-- ("start QUEUE KEY TIME NAME" per run), arg[2] the runner's name. "s": 2 at once per
-- group (its outcomes claim the groups' next items), 20 workers, 5 ms per run.
local log = assert(io.open(arg[1], "a"))
local name = arg[2]
wq.queue("s", {
    workers = 20,
    group_limit = {concurrency = 2},
    handler = function(key)
        log:write(string.format("start s %s %.4f %s\n", key, wq.time(), name))
        log:flush()
        wq.sleep(0.005)
    end,
})
