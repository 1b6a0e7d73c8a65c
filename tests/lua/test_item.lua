-- backends: all
-- q:item(key): what a queue knows of one key, on the engine's own queues
-- (lua_test_item) and PostgreSQL's (lua_pg_test_item): queued, processing,
-- waiting (ready_at, attempt, last_error), done (finished_at, result, with
-- keep_done), dead (error, attempts, failed_at), else nil. A key that is
-- pending again wins over its dead letter or done memory.
local t = require "wqtest"
t.watchdog(60)

local fields = {"key", "state", "payload", "priority", "group", "attempt", "last_error",
                "ready_at", "finished_at", "result", "error", "attempts", "failed_at"}

-- The field names an entry has, sorted.
local function names(it)
    local out = {}
    for _, f in ipairs(fields) do
        if it[f] ~= nil then
            out[#out + 1] = f
        end
    end
    return out
end

do -- queued, with payload, priority and group; an unknown key is nil
    local q = wq.queue("iq", {handler = function() end})
    q:pause()
    q:add("a", {n = 1}, {priority = 5, group = "g1"})
    local it = q:item("a")
    t.ok(it, "a queued key is known")
    t.eq(it.key, "a", "its key")
    t.eq(it.state, "queued", "state queued")
    t.eq(it.payload, {n = 1}, "its payload")
    t.eq(it.priority, 5, "its priority")
    t.eq(it.group, "g1", "its group")
    t.eq(it.attempt, 1, "attempt 1")
    t.eq(it.ready_at, nil, "no ready_at")
    t.eq(it.last_error, nil, "no last_error")
    t.eq(q:item("never"), nil, "a key never added is nil")
    t.eq(q:item("a/b c%"), nil, "an odd key never added is nil")
    t.raises(function() q:item() end, "item", "a missing key is refused")
    q:remove("a")
    if os.getenv("WQ_BACKEND") == "pg" then -- the database keeps its history (SPEC 11)
        t.eq(q:item("a").state, "removed", "a removed key: its last run, removed")
    else
        t.eq(q:item("a"), nil, "a removed key is nil")
    end
    q:resume()
end

do -- processing while its handler runs; then gone (no keep_done)
    local release = false
    local q = wq.queue("ip", {handler = function()
        while not release do
            wq.sleep(0.02)
        end
    end})
    q:add("run")
    t.ok(t.wait_until(function()
        local it = q:item("run")
        return it and it.state == "processing"
    end, 5), "state processing while the handler runs")
    release = true
    if os.getenv("WQ_BACKEND") == "pg" then -- the database keeps its history (SPEC 11)
        t.ok(t.wait_until(function() return q:item("run").state == "done" end, 5),
            "once done without keep_done: its last run, from the history")
    else
        t.ok(t.wait_until(function() return q:item("run") == nil end, 5),
            "forgotten once done without keep_done")
    end
end

do -- waiting: a delayed add, and a retry with its attempt and last error
    local q = wq.queue("iw", {
        workers = 1,
        limiter = wq.limiter.exponential(30, 30), -- not retried within the test
        handler = function() error("boom\nsecond line", 0) end,
    })
    q:add_after("later", 3600, "p")
    local it = q:item("later")
    t.eq(it.state, "waiting", "a delayed add is waiting")
    t.ok(it.ready_at and math.abs(it.ready_at - (wq.time() + 3600)) < 60, "ready_at: when it is due")
    t.eq(it.payload, "p", "its payload")
    q:add("fails")
    t.ok(t.wait_until(function()
        local f = q:item("fails")
        return f and f.state == "waiting" and f.attempt == 2
    end, 10), "a failed key waits for its retry with attempt 2")
    it = q:item("fails")
    t.eq(it.last_error, "boom\nsecond line", "its last error")
    t.eq(names(it), {"key", "state", "priority", "attempt", "last_error", "ready_at"},
        "a pending key's fields")
    q:remove("later")
    q:remove("fails")
end

do -- done with keep_done: finished_at and result; a re-added key is pending again
    local q = wq.queue("id", {keep_done = 3600, handler = function(key)
        if key == "r" then
            return {rows = 3}
        end
    end})
    q:add("r", {x = 1})
    q:add("plain")
    t.ok(t.wait_until(function()
        local a, b = q:item("r"), q:item("plain")
        return a and a.state == "done" and b and b.state == "done"
    end, 5), "both are done")
    local it = q:item("r")
    t.eq(it.result, {rows = 3}, "its result")
    t.ok(it.finished_at > wq.time() - 60 and it.finished_at <= wq.time() + 1,
        "finished_at is a Unix time")
    t.eq(names(it), {"key", "state", "finished_at", "result"}, "a done key's fields")
    t.eq(names(q:item("plain")), {"key", "state", "finished_at"}, "no result: none shown")
    q:pause()
    t.eq(q:add("r", nil, {force = true}), true, "re-added with force")
    t.eq(q:item("r").state, "queued", "pending wins over the done memory")
    q:remove("r")
    q:resume()
end

do -- dead: error, attempts, failed_at, payload; a re-added dead key is pending again
    local q = wq.queue("ix", {max_retries = 0, handler = function() error("fatal", 0) end})
    q:add("x", {n = 2})
    t.ok(t.wait_until(function()
        local it = q:item("x")
        return it and it.state == "dead"
    end, 5), "state dead")
    local it = q:item("x")
    t.eq(it.error, "fatal", "its error")
    t.eq(it.attempts, 1, "its attempts")
    t.eq(it.payload, {n = 2}, "its payload")
    t.ok(it.failed_at > wq.time() - 60 and it.failed_at <= wq.time() + 1,
        "failed_at is a Unix time")
    t.eq(names(it), {"key", "state", "payload", "error", "attempts", "failed_at"},
        "a dead key's fields")
    q:pause()
    q:add("x")
    t.eq(q:item("x").state, "queued", "pending wins over the dead letter")
    q:remove("x")
    t.eq(q:item("x").state, "dead", "the dead letter is still there")
    q:resume()
end

t.done()
