-- Lua-path benchmark of the queue: what a script pays per q:add / q:get /
-- q:done, measured from Lua (bindings + engine), next to a bare Lua table
-- write on the same keys. bench/bench_lua_path.sh drives it, one mode per
-- process, and compares the medians to client-go's workqueue.
--   wqrun --quiet bench/lua_path.lua MODE [N]
-- Keys are "key:<i>" strings built into an array before timing; one task
-- (the main chunk); only the measured loop is timed, with wq.now()
-- (monotonic wall clock). MODE:
--   a        q:add of N distinct keys, then N times `local k = q:get(); q:done(k)`
--            (handler-less queue "b"); ns per item = whole time / N
--   a1       per key `q:add(k); local g = q:get(); q:done(g)` (depth 1)
--   afly     mode a with each key made in the loop (`q:add("key:" .. i)`), as a
--            script that builds its keys on the fly does: the string is
--            garbage once added (the case that decides which key strings the
--            queue keeps, see "key strings" in src/lua/lqueue.c); the time
--            includes making the strings
--   c        N q:add over 1,000 distinct keys (keys[(i % 1000) + 1]): the
--            dedup path; ns per add
--   table    the baseline for c: N writes t[keys[(i % 1000) + 1]] = true
--            into a plain Lua table, same keys, same loop shape
--   method   the floor of any method call: N keys[(i % 1000) + 1]:len(),
--            a C function found through a metatable's __index table, as
--            q:add is (Lua's own string method), same keys, same loop shape
--   handler  N no-op jobs through a handler queue with 1 worker: from before
--            the adds until the handler has run them all (as bench/jobs.lua:
--            the main chunk polls q:stats().done every millisecond)
-- Prints `<name> <value> <unit>` lines: lua_path_<mode> in ns/item (handler
-- also lua_path_handler_rate in jobs/s), lua_path_<mode>_rss_before (VmRSS
-- once the keys are built, before the loop) and lua_path_<mode>_rss (peak
-- RSS, VmHWM, at the end), in KiB. With LUA_PATH_WINDOW set in the
-- environment it also writes the loop's start and end (wq.now(), i.e.
-- CLOCK_MONOTONIC seconds) to stderr, for `perf record -k CLOCK_MONOTONIC`
-- and `perf report --time START,END` to profile only the measured loop.
local MODE = arg[1] or "a"
local N = tonumber(arg[2]) or 1000000
local DISTINCT = 1000 -- keys in modes c and table

local function out(name, value, unit, fmt)
    print(string.format("lua_path_%s_%s " .. (fmt or "%.6g") .. " %s", MODE, name, value, unit))
end

-- A field of /proc/self/status in KiB (nil where there is no /proc).
local function status_kib(field)
    local f = io.open("/proc/self/status")
    if not f then return nil end
    local kb = f:read("a"):match(field .. ":%s*(%d+)")
    f:close()
    return kb and tonumber(kb)
end

local nkeys = (MODE == "c" or MODE == "table" or MODE == "method") and DISTINCT
    or MODE == "afly" and 0 or N
local keys = {}
for i = 1, nkeys do keys[i] = "key:" .. i end

local elapsed -- seconds of the measured loop
local t0 -- its start, wq.now()
if MODE == "a" or MODE == "afly" then
    local q = wq.queue("b")
    collectgarbage()
    local rss0 = status_kib("VmRSS")
    t0 = wq.now()
    if MODE == "a" then -- (two loops: a choice per add would be timed too)
        for i = 1, N do q:add(keys[i]) end
    else
        for i = 1, N do q:add("key:" .. i) end
    end
    for _ = 1, N do
        local k = q:get()
        q:done(k)
    end
    elapsed = wq.now() - t0
    assert(q:len() == 0 and q:stats().done == N, "mode " .. MODE .. ": queue not drained")
    if rss0 then out("rss_before", rss0, "KiB", "%d") end
elseif MODE == "a1" then
    local q = wq.queue("b")
    collectgarbage()
    local rss0 = status_kib("VmRSS")
    t0 = wq.now()
    for i = 1, N do
        q:add(keys[i])
        local g = q:get()
        q:done(g)
    end
    elapsed = wq.now() - t0
    assert(q:len() == 0 and q:stats().done == N, "mode a1: queue not drained")
    if rss0 then out("rss_before", rss0, "KiB", "%d") end
elseif MODE == "c" then
    local q = wq.queue("b")
    collectgarbage()
    local rss0 = status_kib("VmRSS")
    t0 = wq.now()
    for i = 1, N do q:add(keys[(i % 1000) + 1]) end
    elapsed = wq.now() - t0
    assert(q:len() == math.min(N, DISTINCT), "mode c: wrong queue length")
    if rss0 then out("rss_before", rss0, "KiB", "%d") end
elseif MODE == "table" then
    local t = {}
    collectgarbage()
    local rss0 = status_kib("VmRSS")
    t0 = wq.now()
    for i = 1, N do t[keys[(i % 1000) + 1]] = true end
    elapsed = wq.now() - t0
    assert(t[keys[1]] and t[keys[math.min(N, DISTINCT)]], "mode table: writes missing")
    if rss0 then out("rss_before", rss0, "KiB", "%d") end
elseif MODE == "method" then
    local n = 0
    collectgarbage()
    local rss0 = status_kib("VmRSS")
    t0 = wq.now()
    for i = 1, N do n = keys[(i % 1000) + 1]:len() end
    elapsed = wq.now() - t0
    assert(n == #keys[(N % 1000) + 1], "mode method: wrong length")
    if rss0 then out("rss_before", rss0, "KiB", "%d") end
elseif MODE == "handler" then
    local q = wq.queue("h", {handler = function() end})
    collectgarbage()
    local rss0 = status_kib("VmRSS")
    t0 = wq.now()
    for i = 1, N do q:add(keys[i]) end
    while q:stats().done < N do wq.sleep(0.001) end
    elapsed = wq.now() - t0
    q:shutdown()
    if rss0 then out("rss_before", rss0, "KiB", "%d") end
    print(string.format("lua_path_handler_rate %.6g jobs/s", N / elapsed))
else
    error("lua_path.lua: unknown mode '" .. MODE .. "' (a, afly, a1, c, table, method or handler)")
end

print(string.format("lua_path_%s %.2f ns/item", MODE, elapsed * 1e9 / N))
if os.getenv("LUA_PATH_WINDOW") then
    io.stderr:write(string.format("lua_path_%s_window %.6f,%.6f\n", MODE, t0, t0 + elapsed))
end
local hwm = status_kib("VmHWM")
if hwm then out("rss", hwm, "KiB", "%d") end
wq.exit(0) -- end at once; c leaves 1,000 items in its queue on purpose
