-- The multi-runner model test (tests/e2e/test_pg_runners.sh): queue "m"
-- (4 workers); every run appends two lines to the log arg[1] (one per
-- runner process; RUNNER is arg[2], N counts this process's runs):
--   S RUNNER KEY N ATTEMPT TIME     when the handler starts
--   E RUNNER KEY N ATTEMPT TIME ok|err   when it ends
-- It sleeps 0-30 ms; a payload {"fail": true} fails the first attempt.
local log = assert(io.open(arg[1], "a"))
local me = assert(arg[2])
local n = 0
math.randomseed(os.time() + #me * 7919)

local function line(...)
    log:write(string.format(...))
    log:flush()
end

wq.queue("m", {
    workers = 4,
    max_retries = 3,
    limiter = wq.limiter.exponential(0.01, 0.05),
    handler = function(key, payload, job)
        n = n + 1
        local id = n
        line("S %s %s %d %d %.6f\n", me, key, id, job.attempt, wq.time())
        wq.sleep(math.random() * 0.03)
        if type(payload) == "table" and payload.fail and job.attempt == 1 then
            line("E %s %s %d %d %.6f err\n", me, key, id, job.attempt, wq.time())
            error("fails once: " .. key)
        end
        line("E %s %s %d %d %.6f ok\n", me, key, id, job.attempt, wq.time())
    end,
})
