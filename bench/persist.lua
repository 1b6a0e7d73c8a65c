-- Persistence benchmark (issue 4), the wqrun side; bench/bench_persist.sh
-- drives it. One mode per process:
--   wqrun --quiet [--db FILE [--sync normal|full]] bench/persist.lua N MODE [PREFIX [PAYLOAD]]
-- N jobs (default 1,000,000), keys tostring(1..N) as in bench/jobs.lua.
-- PAYLOAD: bytes of string payload per job (default 0: no payload).
-- KEEP_DONE (environment): keep_done seconds for mode run (default: none).
-- HISTORY (environment): the queue's history option for mode run (default: the queue's own,
-- a day; 0 turns it off).
-- MODE:
--   run      add all N to a queue with a no-op handler (1 worker), then wait
--            until the handler has run every one; prints the add, run and
--            end-to-end rates (with --db the adds are committed while the
--            handler runs: there is one commit per loop turn / 5 ms window),
--            and the loop thread's CPU seconds over the same time.
--   fill     add all N to a queue without a handler and end: the items stay
--            pending, so with --db they are all in the state file.
--   restore  only create the queue (with --db this restores the items a
--            `fill` left), check that all N are queued, print when it was
--            ready (wall-clock Unix time, for the caller to subtract the
--            process start from) and exit at once with wq.exit(0).
-- Prints `<name> <value> <unit>` lines, names prefixed by PREFIX (default
-- "persist").
local N = tonumber(arg[1]) or 1000000
local MODE = arg[2] or "run"
local PREFIX = arg[3] or "persist"
local PAYLOAD = tonumber(arg[4]) or 0

local function out(name, value, unit, fmt)
    print(string.format("%s_%s " .. (fmt or "%.6g") .. " %s", PREFIX, name, value, unit))
end

-- Resident set size in MiB, from /proc (nil where there is none).
local function rss_mib()
    local f = io.open("/proc/self/status")
    if not f then return nil end
    local kb = f:read("a"):match("VmRSS:%s*(%d+)")
    f:close()
    return kb and tonumber(kb) / 1024
end

-- CPU seconds (user + system) of the calling thread, the loop's, from /proc
-- (nil where there is none). On a shared machine the loop's CPU time over a
-- run says what it would take alone better than the wall clock does.
local function loop_cpu()
    local f = io.open("/proc/thread-self/stat")
    if not f then return nil end
    local stat = f:read("a")
    f:close()
    local fields = {}
    for v in stat:gsub("^.*%) ", ""):gmatch("%S+") do fields[#fields + 1] = v end
    -- after "pid (comm) ": state is field 1, utime 12, stime 13 (clock ticks, 100 per second)
    return (tonumber(fields[12]) + tonumber(fields[13])) / 100
end

local payload = PAYLOAD > 0 and string.rep("x", PAYLOAD) or nil

if MODE == "run" then
    -- KEEP_DONE=seconds in the environment: the completed-job memory too.
    local keep = tonumber(os.getenv("KEEP_DONE") or "")
    local history = tonumber(os.getenv("HISTORY") or "")
    local q = wq.queue("persist", {handler = function() end, keep_done = keep, history = history})
    collectgarbage()
    local c0 = loop_cpu()
    local t0 = wq.now()
    for i = 1, N do q:add(i, payload) end
    local t1 = wq.now()
    while q:stats().done < N do wq.sleep(0.001) end
    local t2 = wq.now()
    local c2 = loop_cpu()
    q:shutdown()
    out("add", N / (t1 - t0), "adds/s")
    out("run", N / (t2 - t1), "jobs/s")
    out("end_to_end", N / (t2 - t0), "jobs/s")
    out("end_to_end_time", t2 - t0, "s", "%.3f")
    if c0 then out("loop_cpu", c2 - c0, "s", "%.2f") end
elseif MODE == "fill" then
    local q = wq.queue("persist")
    local t0 = wq.now()
    for i = 1, N do q:add(i, payload) end
    out("fill_add", N / (wq.now() - t0), "adds/s")
    -- No handler: wqrun ends now, committing the N items on the way out.
elseif MODE == "restore" then
    local t0 = wq.now()
    local q = wq.queue("persist") -- restores from the state file, if any
    local t1 = wq.now()
    local ready = wq.time()
    local n = q:len()
    if n ~= N then error(string.format("restored %d items, expected %d", n, N)) end
    out("restore_ready_unix", ready, "s", "%.6f")
    out("restore_in_queue_call", t1 - t0, "s", "%.3f")
    local rss = rss_mib()
    if rss then out("restore_rss", rss, "MiB", "%.1f") end
    wq.exit(0) -- end right away; the items stay in the file
else
    error("persist.lua: unknown mode '" .. MODE .. "' (run, fill or restore)")
end
