-- The delaying and rate-limited sides of the queue: add_after,
-- add_rate_limited, forget, num_requeues (client-go AddAfter,
-- AddRateLimited, Forget, NumRequeues). Short real delays with tolerant
-- checks; exact under --virtual-time (tests/e2e runs this file both ways).
local t = require "wqtest"

local n = 0
local function newq(opts)
    n = n + 1
    return wq.queue("d" .. n, opts)
end

-- Collects keys as they become available, with their time since t0.
local function collector(q, t0)
    local got = {}
    wq.spawn(function()
        while true do
            local k = q:get()
            if not k then
                return
            end
            got[#got + 1] = {k, wq.now() - t0}
            q:done(k)
        end
    end)
    return got
end

local function keys(got)
    local r = {}
    for i, g in ipairs(got) do
        r[i] = g[1]
    end
    return r
end

do -- add_after: waits, then is queued; <= 0 means now; retries counted for each call
    local q = newq()
    local t0 = wq.now()
    t.eq(q:add_after("later", 0.05), true, "add_after returns true")
    t.eq(q:len(), 0, "a delayed key is not queued yet")
    t.eq(q:stats().waiting, 1, "waiting counts it")
    t.eq(q:stats().depth, 0, "not dirty yet")
    q:add_after("now0", 0)
    q:add_after("nowneg", -5)
    t.eq(q:len(), 2, "delays <= 0 add now")
    t.eq(q:stats().retries, 3, "every add_after counts a retry, even <= 0")
    t.eq(q:get(), "now0")
    t.eq(q:get(), "nowneg")
    local k = q:get() -- waits for the delayed one
    t.eq(k, "later")
    t.at(wq.now() - t0, 0.05, "the delayed key arrives after its delay")
    t.eq(q:stats().waiting, 0)
end

do -- ascending ready time; ties in insertion order
    local q = newq()
    local t0 = wq.now()
    q:add_after("a", 0.06)
    q:add_after("b", 0.02)
    q:add_after("c", 0.04)
    q:add_after("d", 0.04)
    q:add_after("e", 0.02)
    local got = collector(q, t0)
    wq.sleep(0.1)
    t.eq(keys(got), {"b", "e", "c", "d", "a"}, "ascending ready time, ties in insertion order")
    if #got == 5 then
        t.at(got[1][2], 0.02, "b at 0.02")
        t.at(got[3][2], 0.04, "c at 0.04")
        t.at(got[5][2], 0.06, "a at 0.06")
    end
    q:shutdown()
end

do -- earliest wins: a later or equal time is ignored, an earlier one replaces
    local q = newq()
    local t0 = wq.now()
    q:add_after("x", 0.06)
    t.eq(q:add_after("x", 0.02), true, "an earlier time replaces")
    q:add_after("y", 0.02)
    q:add_after("y", 0.06) -- ignored
    q:add_after("y", 0.02) -- ignored (not earlier in real time either)
    t.eq(q:stats().waiting, 2, "one waiting entry per key")
    t.eq(q:stats().retries, 5, "each call counted")
    local got = collector(q, t0)
    wq.sleep(0.12)
    t.eq(keys(got), {"x", "y"}, "each key ran once, at the earliest time")
    if #got == 2 then
        t.at(got[1][2], 0.02, "x at the earlier time")
        t.at(got[2][2], 0.02, "y at the earlier time")
    end
    q:shutdown()
end

do -- no dedup between waiting and queued: add(x) does not cancel add_after(x)
    local q = newq()
    local t0 = wq.now()
    q:add_after("x", 0.05)
    q:add("x")
    t.eq(q:len(), 1, "queued now")
    t.eq(q:stats().waiting, 1, "and still waiting")
    local got = collector(q, t0)
    wq.sleep(0.1)
    t.eq(keys(got), {"x", "x"}, "x runs now and again after the delay")
    if #got == 2 then
        t.at(got[1][2], 0, "first run at once", 0.02)
        t.at(got[2][2], 0.05, "second run after the delay")
    end
    q:shutdown()
end

do -- a delayed key that fires while queued is deduplicated; while processing, runs after done
    local q = newq()
    q:add("dup")
    q:add_after("dup", 0.01)
    wq.sleep(0.03)
    t.eq(q:len(), 1, "the delayed add merged into the queued key")
    t.eq(q:stats().adds, 1)

    local q2 = newq()
    q2:add("busy")
    t.eq(q2:get(), "busy")
    q2:add_after("busy", 0.01)
    wq.sleep(0.03)
    t.eq(q2:len(), 0, "fired while processing: not queued yet")
    t.eq(q2:stats().depth, 1, "but dirty")
    q2:done("busy")
    t.eq(q2:len(), 1, "queued after done")
end

do -- after shutdown: add_after ignored and not counted; pending delayed entries dropped
    local q = newq()
    q:add_after("pending", 0.02)
    q:shutdown()
    t.eq(q:add_after("x", 0.01), false, "add_after after shutdown returns false")
    t.eq(q:add_after("y", 0), false)
    t.eq(q:stats().retries, 1, "not counted after shutdown")
    wq.sleep(0.05)
    t.eq(q:len(), 0, "a pending delayed entry does not fire after shutdown")
    t.eq(q:get(), nil, "get returns nil")
    t.eq(q:stats().waiting, 0, "a dropped delayed entry is no longer waiting")
end

do -- a delayed entry stops counting as waiting at shutdown itself
    local q = newq()
    q:add_after("k", 10)
    t.eq(q:stats().waiting, 1, "waiting before shutdown")
    q:shutdown()
    t.eq(q:stats().waiting, 0, "not waiting after shutdown")
end

do -- add_rate_limited = add_after(key, limiter:when(key)); forget and num_requeues
    local lim = wq.limiter.exponential(0.01, 1)
    local q = newq({limiter = lim})
    t.eq(q:num_requeues("k"), 0, "no history")
    local t0 = wq.now()
    t.eq(q:add_rate_limited("k"), true)
    t.eq(q:num_requeues("k"), 1, "when() counted a failure")
    t.eq(lim:num_requeues("k"), 1, "the queue uses the limiter object given")
    t.eq(q:stats().retries, 1, "a retry")
    local k = q:get()
    t.eq(k, "k")
    t.at(wq.now() - t0, 0.01, "first delay = base")
    -- Add/Get/Done never change the count
    q:done("k")
    q:add("k")
    q:get()
    q:done("k")
    t.eq(q:num_requeues("k"), 1, "add/get/done leave num_requeues alone")
    t0 = wq.now()
    q:add_rate_limited("k")
    q:get()
    t.at(wq.now() - t0, 0.02, "second delay = 2 * base")
    q:done("k")
    t.eq(q:num_requeues("k"), 2)
    q:forget("k")
    t.eq(q:num_requeues("k"), 0, "forget clears the history")
    t.eq(lim:num_requeues("k"), 0)
    t0 = wq.now()
    q:add_rate_limited("k")
    q:get()
    t.at(wq.now() - t0, 0.01, "after forget the delay starts over")
    q:done("k")
    q:forget("never-seen") -- harmless
    t.eq(q:num_requeues("never-seen"), 0)

    -- keys are independent
    q:add_rate_limited("a")
    q:add_rate_limited("a")
    q:add_rate_limited("b")
    t.eq(q:num_requeues("a"), 2)
    t.eq(q:num_requeues("b"), 1)

    -- when() is called even after shutdown: the count grows
    q:shutdown()
    t.eq(q:add_rate_limited("a"), false, "ignored after shutdown")
    t.eq(q:num_requeues("a"), 3, "but the limiter still counted it")
end

do -- the default limiter: 5 ms, 10 ms, ... per key (and a shared bucket of 10/100)
    local q = newq()
    for _ = 1, 3 do
        q:add_rate_limited("k")
    end
    t.eq(q:num_requeues("k"), 3, "default limiter counts")
    t.eq(q:stats().waiting, 1, "one waiting entry, the earliest (5 ms)")
    local t0 = wq.now()
    t.eq(q:get(), "k")
    t.ok(wq.now() - t0 <= 0.005 + 0.25, "at most 5 ms (+ slack)")
    q:done("k")
end

do -- with_max_wait through a queue
    local q = newq({limiter = wq.limiter.with_max_wait(wq.limiter.exponential(1, 1000), 0.02)})
    local t0 = wq.now()
    q:add_rate_limited("k")
    q:get()
    t.at(wq.now() - t0, 0.02, "capped at max wait")
    q:done("k")
end

do -- add_after with a priority: the key is queued at that priority when it fires
    local q = newq()
    q:add_after("urgent", 0.02, nil, {priority = 5})
    q:add("a")
    q:add("b")
    wq.sleep(0.04)
    t.eq(q:len(), 3)
    t.eq(q:get(), "urgent", "the delayed key kept its priority")
    t.eq(q:get(), "a")
end

do -- cancel_after (wqrun extra): cancels a pending delayed add
    local q = newq()
    q:add_after("c", 0.02)
    t.eq(q:cancel_after("c"), true, "a pending delayed add was cancelled")
    t.eq(q:cancel_after("c"), false, "nothing left to cancel")
    wq.sleep(0.04)
    t.eq(q:len(), 0, "cancelled add never fires")
end

t.done()
