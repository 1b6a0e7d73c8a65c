-- The base queue (client-go Add/Get/Done/Len/ShutDown/ShutDownWithDrain)
-- at the Lua level, priorities, and the counters of q:stats().
local t = require "wqtest"

local n = 0
local function newq(opts)
    n = n + 1
    return wq.queue("q" .. n, opts)
end

-- require "wq" gives the global table
t.eq(require("wq"), wq, 'require "wq" is the global wq')
t.eq(type(wq.version), "string", "wq.version")

do -- Len examples of WORKQUEUE.md: Add foo, Add bar, Add foo -> 2
    local q = newq()
    t.eq(q:len(), 0, "new queue is empty")
    t.eq(q:add("foo"), true, "add returns true")
    t.eq(q:add("bar"), true)
    t.eq(q:add("foo"), true, "re-adding a queued key is not an error")
    t.eq(q:len(), 2, "Add foo, Add bar, Add foo -> Len 2")
    t.eq(q:stats().adds, 2, "a duplicate add does not count")
    t.eq(q:stats().depth, 2)
    -- FIFO, the duplicate kept its place
    t.eq(q:get(), "foo", "FIFO: foo first")
    t.eq(q:get(), "bar", "FIFO: bar second")
    t.eq(q:len(), 0)
    t.eq(q:stats().processing, 2, "two processing")
    t.eq(q:done("foo"), true, "done of a processing key")
    t.eq(q:done("bar"), true)
    t.eq(q:done("bar"), false, "done of a key that is not processing is ignored")
    t.eq(q:len(), 0, "done without a re-add queues nothing")
    t.eq(q:stats().processing, 0)
end

do -- Add foo, Get, Add foo -> Len 0; after Done(foo) -> 1
    local q = newq()
    q:add("foo")
    local k, p = q:get()
    t.eq(k, "foo")
    t.eq(p, nil, "no payload")
    t.eq(q:add("foo"), true, "adding a processing key")
    t.eq(q:len(), 0, "a key re-added while processing is not in Len")
    t.eq(q:stats().depth, 1, "but it is dirty (depth 1)")
    t.eq(q:stats().adds, 2, "and counted as an add")
    for _ = 1, 5 do
        q:add("foo")
    end
    t.eq(q:stats().adds, 2, "more adds while dirty do not count")
    t.eq(q:len(), 0)
    q:done("foo")
    t.eq(q:len(), 1, "done re-queues the re-added key")
    t.eq(q:get(), "foo", "and get hands it out once more")
    q:done("foo")
    t.eq(q:len(), 0, "only once")
    t.eq(q:stats().processing, 0)
end

do -- number keys are converted with tostring
    local q = newq()
    q:add(42)
    q:add(1.5)
    q:add("42")
    t.eq(q:len(), 2, "42 and '42' are the same key")
    local k = q:get()
    t.eq(k, "42", "a number key comes back as a string")
    t.eq(math.type(k), nil, "not a number")
    t.eq(q:get(), "1.5")
    q:done(42)
    t.eq(q:stats().processing, 1, "done(42) finished key '42'")
    q:done("1.5")
    t.eq(q:stats().processing, 0)
end

do -- empty key and binary keys are keys like any other
    local q = newq()
    q:add("")
    q:add("a\0b")
    q:add("a\0c")
    t.eq(q:len(), 3)
    t.eq(q:get(), "")
    t.eq(q:get(), "a\0b", "keys are byte strings (embedded NUL)")
    t.eq(q:get(), "a\0c")
end

do -- get waits while empty and is woken by add (from another task)
    local q = newq()
    local got = {}
    local tk = wq.spawn(function()
        local k = q:get()
        got[#got + 1] = k
        q:done(k)
    end)
    t.eq(type(tk), "table", "spawn returns a task")
    wq.sleep(0)
    t.eq(#got, 0, "get is waiting")
    q:add("x")
    t.eq(#got, 0, "the waiter is woken later, not inline by add")
    wq.sleep(0)
    t.eq(got, {"x"}, "waiter got the key")
end

do -- several waiting getters: one add wakes one of them, in FIFO order
    local q = newq()
    local order = {}
    for i = 1, 3 do
        wq.spawn(function()
            local k = q:get()
            order[#order + 1] = i .. "=" .. tostring(k)
        end)
    end
    wq.sleep(0)
    q:add("a")
    wq.sleep(0)
    t.eq(order, {"1=a"}, "one add wakes the first waiter only")
    q:add("b")
    q:add("c")
    wq.sleep(0)
    t.eq(order, {"1=a", "2=b", "3=c"}, "waiters are served in FIFO order")
end

do -- shutdown: adds ignored, get drains then returns nil, waiters wake with nil
    local q = newq()
    local results = {}
    local waiter_q = newq()
    for i = 1, 2 do
        wq.spawn(function()
            local k = waiter_q:get()
            results[i] = k == nil and "nil" or k
        end)
    end
    wq.sleep(0)
    t.eq(waiter_q:shutting_down(), false)
    waiter_q:shutdown()
    t.eq(waiter_q:shutting_down(), true, "shutting_down after shutdown")
    wq.sleep(0)
    t.eq(results, {"nil", "nil"}, "shutdown wakes every waiting get with nil")
    waiter_q:shutdown() -- idempotent
    t.eq(waiter_q:shutting_down(), true, "shutdown is idempotent")

    q:add("a")
    q:add("b")
    q:shutdown()
    t.eq(q:add("c"), false, "add after shutdown returns false")
    t.eq(q:len(), 2, "and is ignored")
    t.eq(q:stats().adds, 2, "no metric for an ignored add")
    t.eq(q:get(), "a", "get keeps returning queued items after shutdown")
    t.eq(q:get(), "b")
    t.eq(q:get(), nil, "then nil once empty")
    t.eq(select("#", q:get()), 1, "nil is a single value")
end

do -- a key re-added before shutdown and still dirty is queued by Done after shutdown
    local q = newq()
    q:add("k")
    t.eq(q:get(), "k")
    q:add("k")
    q:shutdown()
    t.eq(q:len(), 0)
    q:done("k")
    t.eq(q:len(), 1, "done queues the dirty key even after shutdown")
    t.eq(q:get(), "k", "get hands it out")
    q:done("k")
    t.eq(q:get(), nil)
end

do -- shutdown_with_drain waits for processing items (not queued ones), with tasks
    local q = newq()
    q:add("a")
    q:add("b")
    q:add("c")
    local log = {}
    local function worker(name)
        while true do
            local k = q:get()
            if not k then
                log[#log + 1] = name .. ":exit"
                return
            end
            wq.sleep(0.02)
            log[#log + 1] = name .. ":" .. k
            q:done(k)
        end
    end
    wq.spawn(worker, "w1")
    wq.spawn(worker, "w2")
    wq.sleep(0.005)
    t.eq(q:stats().processing, 2, "two workers busy")
    t.eq(q:len(), 1)
    local t0 = wq.now()
    q:shutdown_with_drain()
    local waited = wq.now() - t0
    t.eq(q:stats().processing, 0, "drain returns once nothing is processing")
    t.eq(q:len(), 0, "workers kept draining queued items after shutdown")
    t.ok(waited >= 0.03, "drain waited for the second round (" .. waited .. ")")
    t.eq(q:shutting_down(), true)
    t.eq(q:add("d"), false, "no adds after shutdown_with_drain")
    wq.sleep(0.001)
    table.sort(log)
    t.eq(log, {"w1:a", "w1:c", "w1:exit", "w2:b", "w2:exit"}, "every item ran once, workers exited")
end

do -- shutdown_with_drain on an idle queue returns at once; from the main chunk
    local q = newq()
    q:add("queued-only")
    local t0 = wq.now()
    q:shutdown_with_drain()
    t.at(wq.now() - t0, 0, "nothing processing: returns at once", 0.05)
    t.eq(q:len(), 1, "queued items stay")
end

do -- a later shutdown() releases a drain waiter
    local q = newq()
    q:add("stuck")
    t.eq(q:get(), "stuck")
    local returned = false
    wq.spawn(function()
        q:shutdown_with_drain()
        returned = true
    end)
    wq.sleep(0.01)
    t.eq(returned, false, "drain waits for the processing key")
    q:shutdown()
    wq.sleep(0)
    t.eq(returned, true, "shutdown() releases the drain")
    t.eq(q:stats().processing, 1, "the key is still processing")
    q:done("stuck")
end

do -- several drain waiters all return when processing becomes empty
    local q = newq()
    q:add("x")
    q:get()
    local back = 0
    for _ = 1, 3 do
        wq.spawn(function()
            q:shutdown_with_drain()
            back = back + 1
        end)
    end
    wq.sleep(0.005)
    t.eq(back, 0)
    q:done("x")
    wq.sleep(0)
    t.eq(back, 3, "every drain waiter returns")
end

do -- priorities: higher first, FIFO within a level
    local q = newq()
    q:add("low1", nil, {priority = -1})
    q:add("a")
    q:add("hi1", nil, {priority = 10})
    q:add("b", nil, {priority = 0})
    q:add("hi2", nil, {priority = 10})
    q:add("mid", nil, {priority = 5})
    local order = {}
    while q:len() > 0 do
        local k = q:get()
        order[#order + 1] = k
        q:done(k)
    end
    t.eq(order, {"hi1", "hi2", "mid", "a", "b", "low1"}, "priority order, FIFO within a level")
end

do -- re-adding can raise a priority (to the back of the new level), never lower it
    local q = newq()
    q:add("a", nil, {priority = 1})
    q:add("b", nil, {priority = 1})
    q:add("c", nil, {priority = 5})
    q:add("d", nil, {priority = 5})
    q:add("a", nil, {priority = 5}) -- raised: behind c and d
    q:add("d", nil, {priority = 0}) -- lower: ignored, d keeps its place
    q:add("b") -- no priority: keeps 1
    local order = {}
    for _ = 1, 4 do
        local k = q:get()
        order[#order + 1] = k
        q:done(k)
    end
    t.eq(order, {"c", "d", "a", "b"}, "raise goes to the back of the new level; lowering ignored")
end

do -- the priority is kept while the key is pending and dropped afterwards
    local q = newq()
    q:add("k", nil, {priority = 7})
    t.eq(q:get(), "k")
    q:add("k") -- re-added while processing, no priority given: keeps 7
    q:add("z", nil, {priority = 3})
    q:done("k")
    t.eq(q:get(), "k", "re-added key kept priority 7 (ahead of z at 3)")
    q:done("k")
    t.eq(q:get(), "z")
    q:done("z")
    -- nothing pending for k any more: a new add starts at priority 0
    q:add("p0")
    q:add("k")
    q:add("n1", nil, {priority = -1})
    t.eq(q:get(), "p0", "k's old priority was dropped: FIFO at 0")
    t.eq(q:get(), "k")
    t.eq(q:get(), "n1")
end

do -- priorities interact with waiting getters
    local q = newq()
    local got
    wq.spawn(function()
        got = q:get()
    end)
    wq.sleep(0)
    q:add("first", nil, {priority = 1})
    q:add("second", nil, {priority = 9})
    wq.sleep(0)
    -- the waiter was woken by the first add but takes the head when it runs
    t.ok(got == "first" or got == "second", "waiter got an item: " .. tostring(got))
    t.eq(q:len(), 1)
end

do -- extreme priorities are accepted
    local q = newq()
    q:add("min", nil, {priority = -2147483648})
    q:add("max", nil, {priority = 2147483647})
    t.eq(q:get(), "max")
    t.eq(q:get(), "min")
end

do -- stats: every SPEC field is present and has the right type
    local q = newq()
    local s = q:stats()
    for _, f in ipairs({"depth", "processing", "waiting", "adds", "done", "retries", "failures", "dead"}) do
        t.eq(math.type(s[f]), "integer", "stats." .. f .. " is an integer")
        t.eq(s[f], 0, "stats." .. f .. " starts at 0")
    end
    q:add("a")
    q:add("b")
    q:add_after("c", 30)
    q:get()
    s = q:stats()
    t.eq(s.depth, 1, "depth: dirty keys not handed out")
    t.eq(s.processing, 1)
    t.eq(s.waiting, 1, "waiting: delayed adds")
    t.eq(s.adds, 2)
    t.eq(s.retries, 1, "add_after counts a retry")
    q:done("a")
    t.eq(q:stats().done, 1, "done counted")
    q:done("a")
    t.eq(q:stats().done, 1, "an ignored done is not counted")
    q:shutdown()
end

do -- a queue without a handler holding items does not keep the process alive;
    -- a task blocked in get neither (checked end to end in tests/e2e).
    local q = newq()
    t.eq(q:add("left-behind"), true)
    wq.spawn(function()
        q:get()
        q:get() -- blocks forever on an empty queue
    end)
end

do -- tostring and name
    local q = wq.queue("named.queue-1_x")
    t.eq(q:name(), "named.queue-1_x")
    t.matches(tostring(q), "named.queue-1_x")
end

t.done()
