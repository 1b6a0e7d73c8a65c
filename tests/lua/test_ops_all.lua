-- backends: all
-- Operating a queue from Lua (SPEC 7.5) on every backend: the engine's own
-- (lua_test_ops_all) and PostgreSQL's (lua_pg_test_ops_all), where each
-- action is the database's for every runner: pause/resume/paused, remove,
-- cancel of a running handler, items{state=, limit=, after_key=} in key
-- order, dead/retry_dead/purge_dead. test_ops.lua has the engine's details
-- (q:len, q:get, wq.exec children).
local t = require "wqtest"
t.watchdog(60)

local function wait_for(cond, what, timeout)
    return t.ok(t.wait_until(cond, timeout or 5), what)
end

local function keys(list)
    local out = {}
    for i, it in ipairs(list) do
        out[i] = it.key
    end
    return out
end

do -- a paused queue takes adds, lists them and runs nothing until resumed, then in order
    local ran = {}
    local q = wq.queue("p", {workers = 1, handler = function(key) ran[#ran + 1] = key end})
    t.eq(q:paused(), false, "a new queue is running")
    q:pause()
    t.eq(q:paused(), true, "paused")
    t.eq(q:add("a", {n = 1}), true, "a paused queue takes adds")
    t.eq(q:add("b"), true)
    wq.sleep(0.4)
    t.eq(#ran, 0, "nothing handed out while paused")
    local items = q:items()
    t.eq(keys(items), {"a", "b"}, "items lists the paused queue's items")
    t.eq(items[1].state, "queued", "state queued")
    t.eq(items[1].payload, {n = 1}, "with its payload")
    t.eq(items[1].attempt, 1, "attempt 1")
    t.eq(items[1].priority, 0, "priority 0")
    q:pause()
    t.eq(q:paused(), true, "pausing twice is fine")
    q:resume()
    t.eq(q:paused(), false, "resumed")
    wait_for(function() return #ran == 2 end, "both run after the resume")
    t.eq(ran, {"a", "b"}, "in their order")
end

do -- remove: a pending item goes without running; a second remove finds nothing
    local ran = {}
    local q = wq.queue("r", {handler = function(key) ran[#ran + 1] = key end})
    q:pause()
    q:add("x")
    q:add("y")
    t.eq(q:remove("x"), true, "remove a queued key")
    t.eq(q:remove("x"), false, "nothing left to remove")
    t.eq(q:remove("never"), false, "a key never added")
    q:resume()
    wait_for(function() return #ran == 1 end, "y runs")
    wq.sleep(0.3)
    t.eq(ran, {"y"}, "x never ran")
end

do -- cancel: the handler's wait raises "cancelled"; no retry, no dead letter
    local events = {}
    local q = wq.queue("c", {max_retries = 3, handler = function(key)
        events[#events + 1] = "start " .. key
        local ok, err = pcall(wq.sleep, 30)
        events[#events + 1] = "end " .. key .. " " .. (ok and "ok" or tostring(err))
    end})
    q:add("long")
    wait_for(function() return #events == 1 end, "the handler started")
    local running = q:items{state = "processing"}
    t.eq(keys(running), {"long"}, "items{state='processing'} shows the running key")
    t.eq(q:cancel("long"), true, "cancel a running key")
    wait_for(function() return #events == 2 end, "the handler ended")
    t.matches(events[2], "end long", "the handler's own key")
    t.matches(events[2], "cancelled", "its wait raised cancelled")
    wq.sleep(0.3)
    t.eq(#events, 2, "not retried")
    t.eq(#q:dead(), 0, "not dead-lettered")
    t.eq(#q:items(), 0, "gone")
    t.eq(q:cancel("long"), false, "nothing runs it any more")
    t.eq(q:cancel("never"), false, "a key never added")
end

do -- dead letters: listed with their payload and error; retried with a clean count; purged
    local runs = 0
    local q = wq.queue("d", {max_retries = 0, handler = function(key)
        runs = runs + 1
        error("boom " .. key)
    end})
    q:add("f1", {n = 1})
    wait_for(function() return #q:dead() == 1 end, "f1 is dead")
    local d = q:dead()[1]
    t.eq(d.key, "f1", "dead key")
    t.eq(d.payload, {n = 1}, "dead payload")
    t.matches(d.error, "boom f1", "dead error")
    t.eq(d.attempts, 1, "one attempt")
    t.ok(d.failed_at > wq.time() - 60 and d.failed_at <= wq.time() + 1, "failed_at is a Unix time")
    t.eq(q:retry_dead("nope"), false, "retry_dead of a key that is not dead")
    t.eq(q:retry_dead("f1"), true, "retry_dead")
    wait_for(function() return runs == 2 end, "f1 ran again")
    wait_for(function() return #q:dead() == 1 end, "and died again")
    q:add("f2")
    wait_for(function() return #q:dead() == 2 end, "f2 is dead too")
    t.eq(q:purge_dead(), 2, "purge_dead says how many")
    t.eq(#q:dead(), 0, "none left")
    t.eq(q:purge_dead(), 0, "nothing to purge")
end

do -- items: pages in key order (bytes), state filter, ready_at of a delayed item
    local q = wq.queue("i", {handler = function() end})
    q:pause()
    for _, k in ipairs({"k3", "k1", "K2", "k5", "k4"}) do
        q:add(k)
    end
    q:add_after("k9", 3600)
    t.eq(keys(q:items{limit = 2}), {"K2", "k1"}, "the first page, in byte order")
    t.eq(keys(q:items{after_key = "k1", limit = 2}), {"k3", "k4"}, "the next page")
    t.eq(keys(q:items{after_key = "k5"}), {"k9"}, "the last one")
    local w = q:items{state = "waiting"}
    t.eq(keys(w), {"k9"}, "state waiting: the delayed item only")
    t.ok(w[1].ready_at and math.abs(w[1].ready_at - (wq.time() + 3600)) < 60,
         "ready_at is when it comes due (Unix time)")
    t.eq(#q:items{state = "queued"}, 5, "state queued")
    t.eq(#q:items{state = "processing"}, 0, "state processing")
    t.raises(function() q:items{state = "bogus"} end, "state", "a bad state is refused")
    t.raises(function() q:items{limit = 0} end, "limit", "a bad limit is refused")
    for _, k in ipairs({"k1", "K2", "k3", "k4", "k5", "k9"}) do
        q:remove(k)
    end
    t.eq(#q:items(), 0, "all removed")
    q:resume()
end

t.done()
