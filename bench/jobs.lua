-- Jobs benchmark (issue 3): no-op jobs through a handler queue, in memory,
-- with 1 and 8 workers, next to the cost of a bare Lua coroutine
-- resume/yield round trip measured in the same run, so the per-job
-- overhead of the runner shows as a ratio.
--   wqrun --quiet bench/jobs.lua [JOBS [WORKERS]]
-- Prints `<name> <value> <unit>` lines. Run one worker count per process
-- (scripts/bench.sh does): a second run in the same Lua state pays for
-- the first one's garbage.
local N = tonumber(arg[1]) or 1000000
local W = tonumber(arg[2]) or 1

local function out(name, value, unit)
    print(string.format("%s %.6g %s", name, value, unit))
end

-- A bare coroutine round trip: resume, yield back.
local function bare(n)
    local co = coroutine.wrap(function()
        while true do coroutine.yield() end
    end)
    local t0 = os.clock()
    for _ = 1, n do co() end
    return (os.clock() - t0) / n
end

local function run(name, workers, n)
    local q = wq.queue(name, {handler = function(key) end, workers = workers})
    local t0 = wq.now()
    for i = 1, n do q:add(i) end
    local t1 = wq.now()
    while q:stats().done < n do wq.sleep(0.001) end
    local t2 = wq.now()
    q:shutdown()
    return n / (t1 - t0), n / (t2 - t1), n / (t2 - t0)
end

collectgarbage()
local rt = bare(N)
out("lua_resume_yield_roundtrip", rt * 1e9, "ns")
for _, w in ipairs({W}) do
    collectgarbage()
    local adds, runs, total = run("jobs_w" .. w, w, N)
    out("jobs_w" .. w .. "_add", adds, "adds/s")
    out("jobs_w" .. w .. "_run", runs, "jobs/s")
    out("jobs_w" .. w .. "_end_to_end", total, "jobs/s")
    out("jobs_w" .. w .. "_cost_per_job_in_roundtrips", (1 / runs) / rt, "x")
end
