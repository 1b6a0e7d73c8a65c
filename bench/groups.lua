-- Group limits benchmark (issue 11): no-op jobs through a handler queue, in
-- memory, as bench/jobs.lua does, with and without groups.
--   wqrun --quiet bench/groups.lua MODE JOBS WORKERS [ARG...]
-- MODE:
--   plain                   no groups (the baseline; the same as jobs.lua)
--   groups G                G groups, group_limit {concurrency = 1}; job i
--                           goes to group i % G through opts.group (one opts
--                           table per group, built before timing)
--   group_of G              the same groups through a group_of function
--                           (names built before timing)
--   onegroup                every job in one group, no limit
--   rate RATE [BURST]       every job in one group with group_limit
--                           {rate = RATE, burst = BURST} (no BURST: the
--                           default, one second's worth)
--   qrate RATE [BURST]      no groups, the queue-wide rate {RATE, BURST}
-- Keys are the integers 1..JOBS. The script adds them all in one loop,
-- then waits (polling stats().done every millisecond, as jobs.lua) until
-- the workers ran them all. Prints `<name> <value> <unit>` lines:
-- groups_<MODE>_add (adds/s), _run (jobs/s from the last add to the last
-- job done), _end_to_end (jobs/s), _cpu_per_job (ns of process CPU time,
-- os.clock, over the run phase: what a job costs when the run waits for a
-- rate), all wall times from wq.now(). One case per process. With
-- GROUPS_WINDOW set in the environment it also writes the add and run
-- phases' bounds (wq.now(), CLOCK_MONOTONIC seconds) to stderr, for
-- `perf record -k CLOCK_MONOTONIC` and `perf report --time START,END`.
local MODE = arg[1] or "plain"
local N = tonumber(arg[2]) or 1000000
local W = tonumber(arg[3]) or 1

local function out(name, value, unit)
    print(string.format("groups_%s_%s %.6g %s", MODE, name, value, unit))
end

local qopts = {handler = function(key) end, workers = W}
local optsof -- job i -> the opts table of its add, or nil
if MODE == "groups" or MODE == "group_of" then
    local G = assert(tonumber(arg[4]), "groups: number of groups expected")
    qopts.group_limit = {concurrency = 1}
    local names, tables = {}, {}
    for g = 1, G do
        names[g] = "group-" .. g
        tables[g] = {group = names[g]}
    end
    if MODE == "groups" then
        optsof = function(i) return tables[i % G + 1] end
    else
        qopts.group_of = function(key) return names[key % G + 1] end
    end
elseif MODE == "onegroup" or MODE == "rate" then
    local one = {group = "one"}
    optsof = function() return one end
    if MODE == "rate" then
        qopts.group_limit = {rate = assert(tonumber(arg[4]), "rate: RATE expected"),
                             burst = tonumber(arg[5])}
    end
elseif MODE == "qrate" then
    qopts.rate = {assert(tonumber(arg[4]), "qrate: RATE expected"), tonumber(arg[5])}
elseif MODE ~= "plain" then
    error("groups.lua: unknown mode '" .. MODE .. "'")
end

local q = wq.queue("bench", qopts)
collectgarbage()
local t0 = wq.now()
if optsof then
    for i = 1, N do q:add(i, nil, optsof(i)) end
else
    for i = 1, N do q:add(i) end
end
local t1, c1 = wq.now(), os.clock()
while q:stats().done < N do wq.sleep(0.001) end
local t2, c2 = wq.now(), os.clock()
local st = q:stats()
assert(st.done == N and st.processing == 0 and q:len() == 0, "not every job ran")
q:shutdown()
if os.getenv("GROUPS_WINDOW") then
    io.stderr:write(string.format("add %.6f,%.6f\nrun %.6f,%.6f\n", t0, t1, t1, t2))
end
out("add", N / (t1 - t0), "adds/s")
out("run", N / (t2 - t1), "jobs/s")
out("end_to_end", N / (t2 - t0), "jobs/s")
out("cpu_per_job", (c2 - c1) * 1e9 / N, "ns")
