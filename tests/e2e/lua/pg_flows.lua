-- Flows on PostgreSQL (tests/e2e/test_pg_flows_sql.sh): a worker runner of queues
-- "parts" and "reports" whose handlers append "run QUEUE KEY" to arg[1]. A key that
-- starts with "fail" fails for good (wq.fail) until a file of its name is in the directory arg[2] (the repair);
-- one that starts with "slow" sleeps 3 s first (cancellable).
local log = assert(io.open(arg[1], "a"))
local fixed = arg[2] -- a directory: a file named KEY there fixes KEY
local function handler(queue)
    return function(key)
        log:write(string.format("run %s %s\n", queue, key))
        log:flush()
        if key:match("^slow") then wq.sleep(3) end
        if key:match("^fail") then
            local f = io.open(fixed .. "/" .. key)
            if not f then return wq.fail("broken " .. key) end
            f:close()
        end
        log:write(string.format("end %s %s\n", queue, key))
        log:flush()
    end
end
wq.queue("parts", {workers = 4, handler = handler("parts")})
wq.queue("reports", {workers = 2, handler = handler("reports")})
