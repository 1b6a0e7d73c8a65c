-- Operating a queue from Lua (SPEC 7.5): pause/resume/paused, remove,
-- cancel (the handler gets "cancelled" at its next yield, its wq.exec child
-- is killed, no retry, no dead letter), items{state=, limit=, after_key=},
-- purge_dead, and the argument checks.
local t = require "wqtest"
t.watchdog(30)

do -- a paused queue takes adds but hands nothing out, to get or to workers
    local ran = {}
    local q = wq.queue("p", {handler = function(key) ran[#ran + 1] = key end})
    t.eq(q:paused(), false, "a new queue is running")
    q:pause()
    t.eq(q:paused(), true)
    t.eq(q:stats().paused, true, "stats().paused")
    t.eq(q:add("a"), true, "a paused queue takes adds")
    q:add("b")
    q:add_after("c", 0.01)
    wq.sleep(0.05)
    t.eq(#ran, 0, "nothing handed out while paused")
    t.eq(q:len(), 3, "the delayed item became queued")
    q:pause()
    t.eq(q:paused(), true, "pausing twice is fine")
    q:resume()
    t.eq(q:paused(), false)
    wq.sleep(0.02)
    t.eq(ran, {"a", "b", "c"}, "resumed: all ran, in order")

    local g = wq.queue("pget")
    g:add("x")
    g:pause()
    local got
    wq.spawn(function() got = g:get() end)
    wq.sleep(0.02)
    t.eq(got, nil, "get waits while paused")
    g:resume()
    wq.sleep(0.01)
    t.eq(got, "x", "and takes the item once resumed")
end

do -- remove: queued or delayed, not processing
    local q = wq.queue("rm", {limiter = wq.limiter.exponential(10, 10)})
    q:add("a", {n = 1})
    q:add("b")
    q:add_after("w", 3600)
    t.eq(q:remove("a"), true, "a queued item")
    t.eq(q:remove("w"), true, "a delayed item")
    t.eq(q:remove("a"), false, "not pending any more")
    t.eq(q:remove("nope"), false, "never added")
    t.eq(q:len(), 1)
    t.eq(q:stats().waiting, 0)
    t.eq(q:stats().depth, 1)
    local k = q:get()
    t.eq(k, "b")
    t.eq(q:remove("b"), false, "a processing item is not removed")
    q:done("b")
    t.eq(q:add("a"), true, "a removed key can be added again")
    t.eq(q:remove(42), false, "a number key is converted")
    t.raises(function() q:remove() end, "remove: bad argument 'key'")
    t.raises(function() q:remove({}) end, "remove: bad argument 'key'")
    t.raises(function() q.remove("x") end, "q:remove: bad argument 'self'")
end

do -- cancel: "cancelled" at the next yield, the exec child killed, no retry, no dead letter
    local log = {}
    local q
    q = wq.queue("cx", {max_retries = 5, workers = 2, handler = function(key)
        if key == "exec" then
            local ok, err = pcall(wq.exec, {"sleep", "30"})
            log[#log + 1] = "exec:" .. tostring(ok) .. ":" .. tostring(err)
            local ok2, err2 = pcall(wq.sleep, 0) -- every later wait raises too
            log[#log + 1] = "sleep:" .. tostring(ok2) .. ":" .. tostring(err2)
            wq.sleep(0)
            log[#log + 1] = "not reached"
        elseif key == "sleep" then
            wq.sleep(10)
            log[#log + 1] = "slept"
        end
    end})
    q:add("exec")
    q:add("sleep")
    wq.sleep(0.05)
    t.eq(q:stats().processing, 2)
    local t0 = wq.now()
    t.eq(q:cancel("exec"), true)
    t.eq(q:cancel("exec"), true, "cancelling twice is fine")
    t.eq(q:cancel("sleep"), true)
    wq.sleep(0.05)
    t.ok(wq.now() - t0 < 1, "the wq.exec wait ended at once (the child was killed)")
    t.eq(log, {"exec:false:cancelled", "sleep:false:cancelled"},
        "the handler got 'cancelled' at its yield, and at every later one")
    local st = q:stats()
    t.eq(st.processing, 0)
    t.eq(st.cancelled, 2, "stats().cancelled")
    t.eq(st.failures, 0, "a cancel is not a failure")
    t.eq(st.dead, 0, "nor a dead letter")
    t.eq(q:len() + st.waiting, 0, "nor retried")
    t.eq(q:num_requeues("exec"), 0)
    t.eq(q:cancel("exec"), false, "no longer pending")
    q:add_after("later", 3600)
    t.eq(q:cancel("later"), false, "not processing")
    q:remove("later") -- a delayed item of a queue with a handler would keep the test alive

    -- a key re-added while it ran runs again after the cancel
    local runs = 0
    local r = wq.queue("cre", {handler = function() runs = runs + 1; wq.sleep(runs == 1 and 10 or 0) end})
    r:add("k")
    wq.sleep(0.01)
    r:add("k")
    r:cancel("k")
    wq.sleep(0.02)
    t.eq(runs, 2, "the re-add stands")

    -- get() in a script's own loop is not a handler run: nothing to cancel
    local own = wq.queue("own")
    own:add("x")
    own:get()
    t.eq(own:cancel("x"), false)
    own:done("x")
    t.raises(function() q:cancel() end, "cancel: bad argument 'key'")
end

do -- items: key order, state filter, paging with limit and after_key
    local q = wq.queue("it", {max_retries = 3, workers = 5, limiter = wq.limiter.exponential(3600, 3600),
        handler = function(key) if key == "f" then error("no") end wq.sleep(10) end})
    q:pause()
    q:add("b", {x = 1}, {priority = 5})
    q:add("a/1")
    q:add("d")
    q:add_after("c", 3600, "later")
    local items = q:items()
    local keys = {}
    for i, it in ipairs(items) do keys[i] = it.key end
    t.eq(keys, {"a/1", "b", "c", "d"}, "every pending item, in key order")
    t.eq(items[2].payload, {x = 1}, "payload decoded")
    t.eq(items[2].priority, 5)
    t.eq(items[2].state, "queued")
    t.eq(items[2].attempt, 1)
    t.eq(items[2].ready_at, nil, "no ready_at without a delayed add")
    t.eq(items[3].state, "waiting")
    t.eq(items[3].payload, "later")
    t.between(items[3].ready_at, wq.time() + 3599, wq.time() + 3601, "ready_at: Unix seconds")
    t.eq(#q:items{state = "waiting"}, 1)
    t.eq(#q:items{state = "processing"}, 0)
    local page = q:items{limit = 2}
    t.eq({page[1].key, page[2].key, #page}, {"a/1", "b", 2}, "limit")
    page = q:items{limit = 2, after_key = page[2].key}
    t.eq({page[1].key, page[2].key, #page}, {"c", "d", 2}, "the next page")
    t.eq(#q:items{after_key = "d"}, 0, "after the last key: empty")
    q:add("f")
    q:resume()
    wq.sleep(0.05)
    local f = q:items{after_key = "e", limit = 1}[1]
    t.eq({f.key, f.state, f.attempt}, {"f", "waiting", 2}, "a failed key waits for its retry, attempt 2")
    local running = q:items{state = "processing"}
    t.eq(#running, 3, "the others run")
    t.raises(function() q:items{state = "done"} end, "items: bad argument 'state'")
    t.raises(function() q:items{limit = 0} end, "items: bad argument 'limit'")
    t.raises(function() q:items{limit = 1.5} end, "items: bad argument 'limit'")
    t.raises(function() q:items{after_key = {}} end, "items: bad argument 'after_key'")
    t.raises(function() q:items{statee = "queued"} end, "items: bad argument 'opts' (unknown option 'statee')")
    t.raises(function() q:items("queued") end, "items: bad argument 'opts'")
    for _, k in ipairs({"a/1", "b", "d"}) do q:cancel(k) end
    t.eq(q:remove("c"), true)
    t.eq(q:remove("f"), true, "a key waiting for its retry can be removed")
end

do -- purge_dead and retry_dead
    local q = wq.queue("pd", {max_retries = 0, handler = function(key) error("bad " .. key) end})
    q:add("x")
    q:add("y")
    q:add("z")
    wq.sleep(0.02)
    t.eq(#q:dead(), 3)
    t.eq(q:retry_dead("z"), true)
    wq.sleep(0.02)
    t.eq(q:purge_dead(), 3)
    t.eq(#q:dead(), 0)
    t.eq(q:stats().dead, 0)
    t.eq(q:purge_dead(), 0, "nothing left")
    t.eq(q:retry_dead("x"), false)
end

t.done()
