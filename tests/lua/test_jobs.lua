-- backends: all
-- Job-runner semantics (SPEC 7.1): the job table, permanent failures,
-- requeue with a new payload, dead letters cleared by a later success, the
-- on_dead hook, and wq.on_shutdown with wq.shutdown().
local t = require "wqtest"
t.watchdog(30)

do -- job.attempt counts runs, job.queue is the queue, job.enqueued_at stays put
    local seen = {}
    local q
    q = wq.queue("ctx", {limiter = wq.limiter.exponential(0.001, 0.001), max_retries = 5,
        handler = function(key, payload, job)
            seen[#seen + 1] = {job.attempt, job.queue == q, job.enqueued_at, payload.n}
            if job.attempt < 3 then
                error("not yet")
            end
        end})
    local before = wq.time()
    q:add("k", {n = 1})
    wq.sleep(0.2)
    t.eq(#seen, 3, "two failures, then success")
    t.eq(seen[1][1], 1, "attempt 1 first")
    t.eq(seen[2][1], 2, "attempt 2 after a failure")
    t.eq(seen[3][1], 3)
    t.eq(seen[1][2], true, "job.queue is the queue object")
    t.between(seen[1][3], before - 0.001, wq.time(), "enqueued_at is when the item was added")
    t.eq(seen[2][3], seen[1][3], "enqueued_at is kept across retries")
    t.eq(seen[3][3], seen[1][3])
end

do -- a handler with two parameters gets no job table (and costs nothing for it)
    local n
    local q = wq.queue("two", {handler = function(...) n = select("#", ...) end})
    q:add("k")
    wq.sleep(0.01)
    t.eq(n, 3, "a vararg handler gets the job table too")
end

do -- wq.fail: returned or raised, dead-lettered at once whatever max_retries says
    local runs = {}
    local dead = {}
    local q = wq.queue("perm", {max_retries = 10,
        on_dead = function(key, payload, err, attempts)
            dead[#dead + 1] = {key, payload and payload.why, err, attempts}
        end,
        handler = function(key, payload)
            runs[key] = (runs[key] or 0) + 1
            if key == "returned" then
                return wq.fail("no such page")
            elseif key == "raised" then
                error(wq.fail("gone for good"))
            end
        end})
    q:add("returned", {why = "404"})
    q:add("raised")
    wq.sleep(0.05)
    t.eq(runs.returned, 1, "a returned wq.fail is not retried")
    t.eq(runs.raised, 1, "a raised wq.fail is not retried")
    local letters = {}
    for _, d in ipairs(q:dead()) do
        letters[d.key] = d
    end
    t.eq(letters.returned and letters.returned.error, "no such page")
    t.eq(letters.raised and letters.raised.error, "gone for good")
    t.eq(letters.returned and letters.returned.attempts, 1)
    t.eq(q:stats().dead, 2)
    t.eq(#dead, 2, "on_dead ran once per dead letter")
    table.sort(dead, function(a, b) return a[1] < b[1] end)
    t.eq(dead[2], {"returned", "404", "no such page", 1}, "on_dead(key, payload, err, attempts)")
    t.eq(tostring(wq.fail("x")), "x", "a wq.fail value shows its message")
end

do -- ordinary failures reach on_dead after max_retries
    local got
    local q = wq.queue("tries", {max_retries = 2, limiter = wq.limiter.exponential(0.001, 0.001),
        on_dead = function(key, payload, err, attempts) got = {key, err, attempts} end,
        handler = function() error("boom", 0) end})
    q:add("k")
    wq.sleep(0.2)
    t.eq(got, {"k", "boom", 3}, "three runs, then on_dead")
end

do -- wq.requeue(seconds, payload): the next run gets the new payload
    local got = {}
    local q = wq.queue("poll", {handler = function(key, payload)
        got[#got + 1] = payload.polls
        if payload.polls < 3 then
            return wq.requeue(0.001, {polls = payload.polls + 1})
        end
    end})
    q:add("job", {polls = 1})
    wq.sleep(0.1)
    t.eq(got, {1, 2, 3}, "each requeue carried the new payload")
    t.eq(q:stats().requeued, 2)
    t.raises(function() wq.requeue(1, print) end, "requeue: bad argument 'payload'")
end

do -- a dead letter goes once the key succeeds after a re-add
    local fixed = false
    local q = wq.queue("fix", {max_retries = 0, handler = function(key, payload)
        if not payload.ok then
            error("bad payload")
        end
        fixed = true
    end})
    q:add("k", {ok = false})
    wq.sleep(0.02)
    t.eq(q:stats().dead, 1, "dead after its failure")
    q:add("k", {ok = true})
    wq.sleep(0.02)
    t.eq(fixed, true)
    t.eq(q:stats().dead, 0, "the success cleared the dead letter")
    t.eq(#q:dead(), 0)
end

do -- argument checks
    t.raises(function() wq.queue("bad_dead", {on_dead = 1}) end,
        "queue: bad argument 'on_dead' (function expected, got number)")
    t.raises(function() wq.on_shutdown("x") end, "on_shutdown: bad argument 'fn'")
end

-- wq.on_shutdown hooks run in order when wq.shutdown() begins a graceful
-- stop, may wait, and the running handler drains meanwhile.
local order = {}
local slow = wq.queue("slow", {handler = function()
    wq.sleep(0.05)
    order[#order + 1] = "handler done"
end})
wq.on_shutdown(function()
    order[#order + 1] = "hook 1"
    wq.sleep(0.01)
    order[#order + 1] = "hook 1 after sleep"
end)
wq.on_shutdown(function()
    order[#order + 1] = "hook 2"
    t.eq(order, {"hook 1", "hook 1 after sleep", "hook 2"}, "hooks run in order, one after the other")
    wq.sleep(0.1)
    t.eq(order[4], "handler done", "the handler drained while the hooks ran")
    t.eq(slow:add("late"), false, "no new adds once stopping")
    t.done()
end)
slow:add("busy")
wq.sleep(0.01)
wq.shutdown()
