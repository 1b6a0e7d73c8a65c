-- Takeover tests (tests/e2e/test_pg_takeover.sh): queue "t" with arg[3]
-- workers (default 20); every run appends to the log arg[1]
--   start RUNNER KEY ATTEMPT TIME   and, when the handler returns,
--   end RUNNER KEY ATTEMPT TIME
-- RUNNER is arg[2]; the handler sleeps payload.s seconds (default 30).
local log = assert(io.open(arg[1], "a"))
local me = arg[2] or "?"

local function note(what, key, job)
    log:write(string.format("%s %s %s %d %.3f\n", what, me, key, job.attempt, wq.time()))
    log:flush()
end

wq.queue("t", {
    workers = tonumber(arg[3]) or 20,
    handler = function(key, payload, job)
        note("start", key, job)
        wq.sleep(type(payload) == "table" and payload.s or 30)
        note("end", key, job)
    end,
})
