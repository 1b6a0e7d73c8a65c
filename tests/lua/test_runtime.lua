-- backends: all
-- The runtime: spawn, sleep, now, time, after/every with cancel, log,
-- plain coroutine.yield inside tasks, user coroutines. (Exit codes, errors
-- in tasks and timer callbacks are checked end to end in tests/e2e.)
local t = require "wqtest"

do -- spawn: arguments passed (nils included), runs later, not inline
    local got
    local task = wq.spawn(function(...)
        got = table.pack(...)
    end, "a", 2, nil, {x = 1}, nil)
    t.eq(type(task), "table", "spawn returns a task")
    t.eq(got, nil, "the task has not run yet (not inline)")
    wq.sleep(0)
    t.eq(got and got.n, 5, "five arguments, nils included")
    t.eq(got and {got[1], got[2], got[3], got[4]}, {"a", 2, nil, {x = 1}}, "arguments passed in order")
    local ids = {}
    for i = 1, 3 do
        ids[i] = wq.spawn(function() end).id
    end
    t.ok(ids[1] ~= ids[2] and ids[2] ~= ids[3], "tasks have distinct ids")
end

do -- tasks run in the order they became ready; nested spawns work
    local order = {}
    for i = 1, 3 do
        wq.spawn(function()
            order[#order + 1] = i
            wq.spawn(function()
                order[#order + 1] = i * 10
            end)
        end)
    end
    wq.sleep(0.001)
    t.eq(order, {1, 2, 3, 10, 20, 30}, "FIFO run order, nested spawns after")
end

do -- a plain coroutine.yield in a task lets the others run, then continues
    local log = {}
    wq.spawn(function()
        log[#log + 1] = "a1"
        coroutine.yield()
        log[#log + 1] = "a2"
    end)
    wq.spawn(function()
        log[#log + 1] = "b1"
        coroutine.yield("ignored", "values")
        log[#log + 1] = "b2"
    end)
    wq.sleep(0.001)
    t.eq(log, {"a1", "b1", "a2", "b2"}, "yield interleaves tasks")
    coroutine.yield() -- in the main chunk too
    t.ok(true, "the main chunk survives a plain yield")
end

do -- user coroutines keep working as in plain Lua
    local gen = coroutine.wrap(function()
        for i = 1, 3 do
            coroutine.yield(i)
        end
    end)
    t.eq({gen(), gen(), gen()}, {1, 2, 3}, "coroutine.wrap yields values")
    local co = coroutine.create(function(a)
        local b = coroutine.yield(a + 1)
        return b * 2
    end)
    local ok1, v1 = coroutine.resume(co, 1)
    local ok2, v2 = coroutine.resume(co, 5)
    t.eq({ok1, v1, ok2, v2}, {true, 2, true, 10}, "resume/yield pass values")
    t.eq(coroutine.status(co), "dead")
    -- and a user coroutine inside a task that itself sleeps between resumes
    local acc = {}
    wq.spawn(function()
        local g = coroutine.wrap(function()
            coroutine.yield("x")
            coroutine.yield("y")
        end)
        acc[1] = g()
        wq.sleep(0.001)
        acc[2] = g()
    end)
    wq.sleep(0.01)
    t.eq(acc, {"x", "y"}, "user coroutine across a task's sleep")
end

do -- sleep
    local t0 = wq.now()
    wq.sleep(0.05)
    t.at(wq.now() - t0, 0.05, "sleep(0.05)")
    t0 = wq.now()
    t.eq(select("#", wq.sleep(0)), 0, "sleep returns nothing")
    wq.sleep(-1)
    t.at(wq.now() - t0, 0, "sleep(0) and sleep(-1) return at once", 0.05)
    -- several sleepers wake in deadline order
    local order = {}
    for _, d in ipairs({0.03, 0.01, 0.02}) do
        wq.spawn(function()
            wq.sleep(d)
            order[#order + 1] = d
        end)
    end
    wq.sleep(0.05)
    t.eq(order, {0.01, 0.02, 0.03}, "sleepers wake in deadline order")
end

do -- now and time
    local a = wq.now()
    t.eq(math.type(a), "float", "now() is a float")
    local b = wq.now()
    t.ok(b >= a, "now() is monotonic")
    local wall = wq.time()
    t.eq(math.type(wall), "float")
    t.ok(math.abs(wall - os.time()) < 5, "time() is Unix time")
    local n0, w0 = wq.now(), wq.time()
    wq.sleep(0.02)
    t.at(wq.time() - w0, wq.now() - n0, "time() moves with now()", 0.01)
    if t.virtual then
        t.near(wq.now() - n0, 0.02, 1e-9, "virtual time: exactly the sleep")
    end
end

do -- after: fires once; cancel before it fires; pending()
    local fired = 0
    local t0 = wq.now()
    local at
    local tm = wq.after(0.02, function()
        fired = fired + 1
        at = wq.now() - t0
    end)
    t.eq(tm:pending(), true, "pending before it fires")
    wq.sleep(0.05)
    t.eq(fired, 1, "after fired once")
    t.at(at or -1, 0.02, "after its delay")
    t.eq(tm:pending(), false, "not pending after firing")
    t.eq(tm:cancel(), false, "cancel after firing returns false")

    local never = false
    local tc = wq.after(0.01, function()
        never = true
    end)
    t.eq(tc:cancel(), true, "cancel of a pending timer returns true")
    t.eq(tc:cancel(), false, "only once")
    t.eq(tc:pending(), false)
    wq.sleep(0.03)
    t.eq(never, false, "a cancelled timer never fires")

    local z = 0
    wq.after(0, function() z = z + 1 end)
    wq.after(-5, function() z = z + 1 end)
    wq.sleep(0.001)
    t.eq(z, 2, "after(0) and after(-5) fire at once")

    -- an unreferenced timer still fires (the host keeps it)
    local anon = false
    wq.after(0.01, function() anon = true end)
    collectgarbage()
    collectgarbage()
    wq.sleep(0.03)
    t.eq(anon, true, "a timer nobody references still fires")
end

do -- timer callbacks are tasks: they may sleep, exec, get; timers fire in deadline order
    local log = {}
    wq.after(0.02, function()
        log[#log + 1] = "b"
    end)
    wq.after(0.01, function()
        log[#log + 1] = "a"
        wq.sleep(0.03)
        log[#log + 1] = "a-after-sleep"
    end)
    wq.sleep(0.06)
    t.eq(log, {"a", "b", "a-after-sleep"}, "callbacks run as tasks that can wait")
end

do -- every: periodic, cancel from outside and from inside
    local ticks, times = 0, {}
    local t0 = wq.now()
    local ev = wq.every(0.02, function()
        ticks = ticks + 1
        times[ticks] = wq.now() - t0
    end)
    wq.sleep(0.105)
    t.eq(ev:pending(), true, "every stays pending")
    t.eq(ev:cancel(), true, "cancel")
    local at_cancel = ticks
    if t.virtual then
        t.eq(ticks, 5, "exactly 5 ticks in 0.105 s at 0.02")
        for i, want in ipairs({0.02, 0.04, 0.06, 0.08, 0.1}) do
            t.near(times[i] or -1, want, 1e-9, "tick " .. i .. " at an exact multiple")
        end
    else
        t.between(ticks, 3, 6, "about 5 ticks in 0.105 s")
        t.at(times[1] or -1, 0.02, "first tick after one interval")
    end
    wq.sleep(0.05)
    t.eq(ticks, at_cancel, "no ticks after cancel")
    t.eq(ev:pending(), false)

    local n, self = 0, nil
    self = wq.every(0.005, function()
        n = n + 1
        if n == 3 then
            t.eq(self:cancel(), true, "cancel from inside the callback")
        end
    end)
    wq.sleep(0.05)
    t.eq(n, 3, "stopped after the third tick")

    -- the schedule does not drift: ticks stay on multiples of the interval
    if t.virtual then
        local ts = {}
        local t1 = wq.now()
        local e2
        e2 = wq.every(0.3, function()
            ts[#ts + 1] = wq.now() - t1
            wq.sleep(0.1) -- a slow callback does not shift the next tick
            if #ts == 3 then
                e2:cancel()
            end
        end)
        wq.sleep(1)
        t.eq(#ts, 3)
        t.near(ts[3] or -1, 0.9, 1e-9, "third tick at 3 x interval")
    end
end

do -- log accepts a format and arguments, or any single value
    t.no_error(function()
        wq.log("plain message")
        wq.log("%s=%d (%.1f)", "x", 42, 1.5)
        wq.log(12)
        wq.log(nil)
        wq.log({})
        wq.log("100%")
    end, "log calls")
    t.raises(function() wq.log("%d", "nope") end, "bad argument", "a bad format raises")
end

do -- spawn from handlers and timers
    local hits = {}
    local q = wq.queue("rt-handler", {
        handler = function(key)
            wq.spawn(function(k)
                wq.sleep(0.001)
                hits[#hits + 1] = "task-from-" .. k
            end, key)
        end,
    })
    q:add("h")
    wq.after(0, function()
        wq.spawn(function() hits[#hits + 1] = "task-from-timer" end)
    end)
    wq.sleep(0.02)
    table.sort(hits)
    t.eq(hits, {"task-from-h", "task-from-timer"}, "spawn works in handlers and timer callbacks")
end

t.done()
