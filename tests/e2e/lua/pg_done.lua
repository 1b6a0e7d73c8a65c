-- keep_done across runners (tests/e2e/test_pg_done.sh): a worker runner of
-- queue "kd" (keep_done 1 hour; each run returns {n = RUN NUMBER, by =
-- NAME}) and queue "short" (keep_done 1 s). arg[1] is the log ("run QUEUE
-- KEY NAME" per run), arg[2] this runner's name.
local log = assert(io.open(arg[1], "a"))
local name = arg[2]
local n = 0
local function handler(queue)
    return function(key)
        n = n + 1
        log:write(string.format("run %s %s %s\n", queue, key, name))
        log:flush()
        return {n = n, by = name}
    end
end
wq.queue("kd", {keep_done = 3600, workers = 2, handler = handler("kd")})
wq.queue("short", {keep_done = 1, handler = handler("short")})
