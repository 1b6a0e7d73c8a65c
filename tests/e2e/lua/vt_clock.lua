-- Run with --virtual-time (tests/e2e/test_virtual_time.sh): the clock
-- stands still while tasks run, jumps to the next timer when all wait, and
-- does not jump while a child process runs.
local t = require "wqtest"
t.watchdog(10 * 86400)

t.eq(t.virtual, true, "this script must run with --virtual-time")

local function ns(x)
    return math.floor(x * 1e9 + 0.5)
end

do -- sleep(86400) returns at once with now() exactly 86400 later
    local t0, w0 = wq.now(), wq.time()
    wq.sleep(86400)
    t.eq(ns(wq.now()) - ns(t0), 86400 * 1000000000, "now() exactly 86400 s later (to the ns)")
    t.near(wq.time() - w0, 86400, 1e-5, "time() moved by the same 86400 s")
end

do -- the clock stands still while a task computes
    local a = wq.now()
    local x = 0
    for i = 1, 300000 do
        x = x + i
    end
    t.eq(wq.now(), a, "no time passes while Lua runs")
    coroutine.yield()
    wq.sleep(0)
    t.eq(wq.now(), a, "nor across a plain yield or sleep(0)")
end

do -- concurrent sleepers: the clock visits each deadline in order
    local t0 = wq.now()
    local seen = {}
    for _, d in ipairs({3600, 60, 1, 7200}) do
        wq.spawn(function()
            wq.sleep(d)
            seen[#seen + 1] = {d, wq.now() - t0}
        end)
    end
    wq.sleep(10000)
    t.eq(#seen, 4)
    local order = {}
    for i, s in ipairs(seen) do
        order[i] = s[1]
        t.near(s[2], s[1], 1e-6, "sleeper " .. s[1] .. " woke exactly on time")
    end
    t.eq(order, {1, 60, 3600, 7200}, "in deadline order")
end

do -- the clock does not jump while a child runs
    local t0 = wq.now()
    local woke_at
    wq.spawn(function()
        wq.sleep(1000)
        woke_at = wq.now() - t0
    end)
    local r = wq.exec({"sleep", "0.2"})
    t.eq(r.status, 0)
    t.eq(wq.now(), t0, "no virtual time passed while the child ran")
    t.eq(woke_at, nil, "the 1000 s sleeper is still asleep")
    wq.sleep(2000)
    t.near(woke_at or -1, 1000, 1e-6, "and wakes exactly at 1000 s afterwards")
end

do -- the same with a grandchild holding the output pipe after the child exited
    local t0 = wq.now()
    local r = wq.exec({"sh", "-c", "(sleep 0.2; echo gc) & echo c"})
    t.eq(r.stdout, "c\ngc\n", "grandchild output collected")
    t.eq(wq.now(), t0, "no jump while the exec was unfinished")
end

do -- after / every on the virtual clock
    local t0 = wq.now()
    local fired_at
    wq.after(3600, function()
        fired_at = wq.now() - t0
    end)
    local ticks = 0
    local tm
    tm = wq.every(60, function()
        ticks = ticks + 1
    end)
    wq.sleep(86400 + 30)
    tm:cancel()
    t.near(fired_at or -1, 3600, 1e-6, "after(3600) fired exactly")
    t.eq(ticks, 1440, "every(60) ticked exactly 1440 times in a day")
end

do -- a handler timeout on the virtual clock is exact
    local q = wq.queue("vt-timeout", {
        timeout = 30,
        max_retries = 0,
        handler = function()
            wq.sleep(60)
        end,
    })
    local t0 = wq.now()
    q:add("slow")
    local gone
    t.ok(t.wait_until(function()
        return q:stats().dead == 1
    end, 1000, 0.5), "timed out")
    gone = wq.now() - t0
    t.ok(gone >= 30 and gone <= 30.5, "failed at 30 s (observed at " .. gone .. ")")
    t.eq(q:dead()[1] and q:dead()[1].error, "timeout")
end

do -- a CPU-looping handler still times out (on the real clock)
    local q = wq.queue("vt-spin", {
        timeout = 0.05,
        max_retries = 0,
        handler = function()
            while true do
            end
        end,
    })
    q:add("spin")
    t.ok(t.wait_until(function()
        return q:stats().dead == 1
    end, 100), "the loop was stopped")
    t.eq(q:dead()[1] and q:dead()[1].error, "timeout")
end

t.done()
