-- tests/e2e/test_pg_health.sh: no-op jobs of queue "h", arg[1] workers (default 100), until the
-- queue is empty. With a log file arg[2]: every run appends its key, and the run of k100 adds
-- "urgent" with priority 5.
local log = arg[2] and assert(io.open(arg[2], "a"))
local q
q = wq.queue("h", {
    workers = tonumber(arg[1] or "100"),
    handler = function(key)
        if log then
            log:write(key, "\n")
            log:flush()
            if key == "k100" then q:add("urgent", nil, {priority = 5}) end
        end
    end,
})
