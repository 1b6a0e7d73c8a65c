-- Prune pauses (issue 10): how long pruning expired completed-job memories
-- holds the loop. bench/bench_prune.sh drives it.
--   wqrun --quiet [--db FILE [--sync normal|full]] bench/prune_pause.lua [N [KEEP [SECONDS [PREFIX]]]]
-- N keys (default 1,000,000, tostring(1..N) as in bench/persist.lua) run
-- through a no-op handler on a queue with keep_done = KEEP seconds
-- (default 2). From 0.2 s after the handler has run them all (the run's
-- last commits), a 1 ms wq.every records
-- the gap between its ticks for SECONDS (default 40) while the memories
-- expire and are pruned (with --db: and their rows in the done table). With
-- a KEEP longer than the run and SECONDS, nothing expires: the same gaps
-- without pruning, for comparison.
-- Prints `<name> <value> <unit>` lines, names prefixed by PREFIX (default
-- "prune"): the worst gap, its 99th and 99.9th percentiles, how many gaps
-- exceeded 5, 8 and 10 ms. (bench/bench_prune.sh counts the done rows left
-- in the state file afterwards.)
local N = tonumber(arg[1]) or 1000000
local KEEP = tonumber(arg[2]) or 2
local SECONDS = tonumber(arg[3]) or 40
local PREFIX = arg[4] or "prune"
local TRACE = os.getenv("PRUNE_TRACE") -- set: each gap over 8 ms on stderr, with wq.time()

local function out(name, value, unit, fmt)
    print(string.format("%s_%s " .. (fmt or "%.6g") .. " %s", PREFIX, name, value, unit))
end

local q = wq.queue("prune", {handler = function() end, keep_done = KEEP})
local t0 = wq.now()
for i = 1, N do q:add(i) end
while q:stats().done < N do wq.sleep(0.001) end
local t1 = wq.now()
out("run", N / (t1 - t0), "jobs/s")
-- The run's last commits come just after the last job: they are not pruning.
wq.sleep(0.2)

-- The gaps go into a presized array: no table growth or garbage while measuring.
local cap = math.floor(SECONDS * 1000) + 16
local gaps = {}
for i = 1, cap do gaps[i] = 0 end
local n, last = 0, wq.now()
local stop = last + SECONDS
local finished = false
local timer
timer = wq.every(0.001, function()
    local now = wq.now()
    if n < cap then
        n = n + 1
        gaps[n] = now - last
    end
    if TRACE and now - last > 0.008 then
        io.stderr:write(string.format("gap %.1f ms ending at %.6f\n", (now - last) * 1000, wq.time()))
    end
    last = now
    if now >= stop and not finished then
        finished = true
        timer:cancel()
    end
end)
while not finished do wq.sleep(0.05) end

local sorted = {}
for i = 1, n do sorted[i] = gaps[i] end
table.sort(sorted)
local function pct(p) return sorted[math.max(1, math.ceil(n * p))] end
local over5, over8, over10 = 0, 0, 0
for i = 1, n do
    local g = gaps[i]
    if g > 0.005 then over5 = over5 + 1 end
    if g > 0.008 then over8 = over8 + 1 end
    if g > 0.010 then over10 = over10 + 1 end
end
out("ticks", n, "ticks", "%d")
out("gap_max", sorted[n] * 1000, "ms", "%.2f")
out("gap_p999", pct(0.999) * 1000, "ms", "%.2f")
out("gap_p99", pct(0.99) * 1000, "ms", "%.2f")
out("gap_p50", pct(0.5) * 1000, "ms", "%.2f")
out("gaps_over_5ms", over5, "gaps", "%d")
out("gaps_over_8ms", over8, "gaps", "%d")
out("gaps_over_10ms", over10, "gaps", "%d")
q:shutdown()
