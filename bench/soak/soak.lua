-- The soak's runner script (bench/soak/soak.sh). arg[1]: this runner's name.
--   "work":  grouped (3 at once per group), keep_done 60 s, 2 retries; a key ending in
--            "x" always fails (dead letter), one ending in "r" fails its first attempt
--            (a retry); 1-5 ms per run.
--   "plain": no limits, keep_done 30 s; keys repeat, so adds dedup and follow up.
--   "tick":  a schedule every minute (every runner defines it; one add per minute).
local name = arg[1] or "r"
local function handler(key, payload, job)
    wq.sleep(0.001 + math.random() * 0.004)
    if key:sub(-1) == "x" then error("soak: planned failure") end
    if key:sub(-1) == "r" and job.attempt == 1 then error("soak: planned retry") end
    return {by = name, n = payload and payload.n}
end
-- Retries per key only (5 ms doubling, at most 1 s): the default limiter's bucket (10 retries
-- a second for the whole queue, client-go's) is below the soak's ~15 retries a second, and
-- would make the retries wait longer and longer: a backlog that grows, not a steady state.
local function limiter() return wq.limiter.exponential(0.005, 1) end
wq.queue("work", {workers = 20, group_limit = {concurrency = 3}, keep_done = 60,
    max_retries = 2, limiter = limiter(), handler = handler})
wq.queue("plain", {workers = 20, keep_done = 30, limiter = limiter(), handler = handler})
local tick = wq.queue("tick", {workers = 1, handler = function() end})
tick:schedule("minutely", "* * * * *", {payload = {from = "cron"}})
