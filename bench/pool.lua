-- Process pool benchmark (SPEC 10.1): no-op jobs through a queue whose
-- handler is a pool of 4 python3 processes (bench/pool_noop.py, which parses
-- each job's JSON and answers {"result":null}), or, as the baseline, through
-- a Lua handler that runs `python3 -c pass` with wq.exec per job (4 workers).
--   wqrun --quiet bench/pool.lua pool|exec [N]
-- Times from before the adds until every job is done (the pool's processes
-- are started and answering before the clock starts) and prints
-- `pool_<mode>_rate <jobs/s> jobs/s`. bench/bench_pool.sh drives it.
local MODE = arg[1] or "pool"
local N = tonumber(arg[2]) or (MODE == "pool" and 200000 or 200)
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"

local q
if MODE == "pool" then
    local p = assert(wq.pool({"python3", here .. "pool_noop.py"}, {size = 4}))
    for _ = 1, 4 do assert(p:call({warm = true})) end -- all started (python's start-up is not timed)
    q = wq.queue("bench", {handler = p, persist = false})
elseif MODE == "exec" then
    q = wq.queue("bench", {workers = 4, persist = false, handler = function()
        local r = wq.exec({"python3", "-c", "pass"})
        if r.status ~= 0 then error("python3 failed: " .. r.stderr) end
    end})
else
    error("mode: pool or exec")
end

local keys = {}
for i = 1, N do keys[i] = "job:" .. i end
local t0 = wq.now()
for i = 1, N do q:add(keys[i]) end
while q:stats().done < N do wq.sleep(0.001) end
local dt = wq.now() - t0
local st = q:stats()
assert(st.succeeded == N, "every job succeeded: " .. st.succeeded)
print(string.format("pool_%s_rate %.1f jobs/s", MODE, N / dt))
