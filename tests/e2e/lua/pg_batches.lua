-- Batches against outcomes (tests/e2e/test_pg_batches.sh). arg[1] the log, one line per
-- run: "start QUEUE KEY TIME NAME" (written before the handler returns), arg[2] the runner.
--   "s": 5 at once per group (the limited claim path), keep_done 30 s;
--   "p": grouped items without limits (the plain claim path), keep_done 30 s.
-- Both: 50 workers, 2 ms per run, a payload {f = true} fails every time (dead-lettered
-- after 2 retries).
local log = assert(io.open(arg[1], "a"))
local name = arg[2]
local function handler(queue)
    return function(key, payload)
        log:write(string.format("start %s %s %.4f %s\n", queue, key, wq.time(), name))
        log:flush()
        wq.sleep(0.002)
        if payload and payload.f then error("planned failure") end
    end
end
local common = {workers = 50, keep_done = 30, max_retries = 2}
local function opts(extra)
    local o = {}
    for k, v in pairs(common) do o[k] = v end
    for k, v in pairs(extra) do o[k] = v end
    return o
end
wq.queue("s", opts({group_limit = {concurrency = 5}, handler = handler("s")}))
wq.queue("p", opts({handler = handler("p")}))
