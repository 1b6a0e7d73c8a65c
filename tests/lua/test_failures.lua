-- backends: all
-- A failed attempt is visible while the key waits for its retry: q:items
-- shows its attempt (failure count + 1) and last_error (the message of the
-- last failed run, traceback left out, cut to 1024 bytes), on the engine's
-- own queues (lua_test_failures) and PostgreSQL's (lua_pg_test_failures).
-- A success clears both; so does a dead letter.
local t = require "wqtest"
t.watchdog(60)

local function item(q, key)
    for _, it in ipairs(q:items()) do
        if it.key == key then
            return it
        end
    end
end

-- Waits until key is listed as waiting with the given attempt; returns its entry.
local function waiting(q, key, attempt)
    local found
    t.wait_until(function()
        local it = item(q, key)
        if it and it.state == "waiting" and it.attempt == attempt then
            found = it
            return true
        end
    end, 10)
    return found
end

do -- failed twice, then succeeds: each wait shows the attempt to come and the last error
    local runs = 0
    local q = wq.queue("f", {
        workers = 1,
        limiter = wq.limiter.exponential(0.4, 0.4), -- long enough to be seen waiting
        handler = function(key, payload, job)
            runs = runs + 1
            if job.attempt == 1 then
                error("boom one\nsecond line", 0)
            elseif job.attempt == 2 then
                return nil, "boom two"
            end
            return true
        end,
    })
    q:add("k", {n = 1})
    local it = waiting(q, "k", 2)
    t.ok(it, "after the first failure k waits with attempt 2")
    if it then
        t.eq(it.last_error, "boom one\nsecond line", "last_error: the whole message of the first failure")
        t.eq(it.payload, {n = 1}, "its payload")
        t.ok(it.ready_at and it.ready_at > wq.now() - 1, "ready_at set")
    end
    it = waiting(q, "k", 3)
    t.ok(it, "after the second failure k waits with attempt 3")
    if it then
        t.eq(it.last_error, "boom two", "last_error: the second failure's message")
    end
    t.ok(t.wait_until(function() return runs == 3 and #q:items() == 0 end, 10),
        "the third run succeeds and the key is gone")
    t.eq(q:stats().failures, 2, "two failures counted")
    t.eq(#q:dead(), 0, "nothing dead")
end

do -- a traceback is left out; a long message is cut to 1024 bytes at a UTF-8 boundary
    local long = string.rep("x", 1023) .. "é" .. string.rep("y", 100) -- é straddles byte 1024
    local q = wq.queue("g", {
        workers = 1,
        limiter = wq.limiter.exponential(30, 30), -- never retried within the test
        handler = function(key)
            if key == "tb" then
                error("raised here") -- with a position and a traceback
            end
            error(long, 0)
        end,
    })
    q:add("tb")
    q:add("long")
    local tb = waiting(q, "tb", 2)
    t.ok(tb, "tb waits with attempt 2")
    if tb then
        t.ok((tb.last_error or ""):find("raised here", 1, true), "the message is kept: " .. tostring(tb.last_error))
        t.ok(not (tb.last_error or ""):find("stack traceback", 1, true), "the traceback is not")
    end
    local lg = waiting(q, "long", 2)
    t.ok(lg, "long waits with attempt 2")
    if lg then
        t.eq(#(lg.last_error or ""), 1023, "cut before the character that crosses 1024 bytes")
        t.eq(lg.last_error, string.rep("x", 1023), "its first 1023 bytes")
    end
    t.eq(item(q, "tb").attempt, 2, "still attempt 2")
    q:remove("tb")
    q:remove("long")
end

do -- a key never failed lists no last_error; a dead letter leaves nothing behind
    local q = wq.queue("h", {
        workers = 1,
        max_retries = 0,
        handler = function(key)
            if key == "bad" then
                error("final", 0)
            end
            wq.sleep(30)
        end,
    })
    q:pause()
    q:add("fresh")
    local it = item(q, "fresh")
    t.ok(it and it.attempt == 1 and it.last_error == nil, "a fresh key: attempt 1, no last_error")
    q:remove("fresh")
    q:add("bad")
    q:resume()
    t.ok(t.wait_until(function() return #q:dead() == 1 end, 10), "bad is dead-lettered at once")
    t.eq(q:dead()[1].error, "final", "with its error")
    q:pause()
    q:add("bad")
    it = item(q, "bad")
    t.ok(it, "bad added again")
    if it then
        t.eq(it.attempt, 1, "a re-added dead key starts at attempt 1")
        t.eq(it.last_error, nil, "with no last_error")
    end
    q:remove("bad")
    q:resume()
end

t.done()
