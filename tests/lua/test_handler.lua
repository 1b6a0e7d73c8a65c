-- Handler outcomes: success forgets; an error (raised, or nil/false plus an
-- error value, or a bare false) retries through the limiter until
-- max_retries, then dead-letters; wq.requeue(s) schedules again without a
-- failure. Plus q:dead(), q:retry_dead() and the q:stats() counters.
local t = require "wqtest"

local n = 0
local function newq(opts)
    n = n + 1
    return wq.queue("h" .. n, opts)
end

local function idle(q)
    return function()
        local s = q:stats()
        return s.depth == 0 and s.processing == 0 and s.waiting == 0
    end
end

do -- success: handler gets key and payload; done and succeeded counted
    local calls, jobs = {}, {}
    local q
    q = newq({
        handler = function(key, payload, job)
            calls[#calls + 1] = {key, payload}
            jobs[#jobs + 1] = {job.attempt, job.queue == q, type(job.enqueued_at)}
        end,
    })
    q:add("a", {x = 1})
    q:add("b")
    q:add(7, "seven")
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(calls, {{"a", {x = 1}}, {"b"}, {"7", "seven"}}, "handler(key, payload, job), in order")
    t.eq(jobs, {{1, true, "number"}, {1, true, "number"}, {1, true, "number"}},
         "the job table: attempt, queue, enqueued_at")
    local s = q:stats()
    t.eq(s.done, 3, "stats.done")
    t.eq(s.adds, 3, "stats.adds")
    t.eq(s.failures, 0)
    t.eq(s.dead, 0)
    t.eq(s.retries, 0)
    t.eq(s.depth, 0)
    t.eq(s.processing, 0)
    t.eq(s.waiting, 0)
    t.eq(s.succeeded, 3, "stats.succeeded (extra)")
    t.eq(s.workers, 1, "stats.workers (extra)")
end

do -- return values that mean success: nothing, nil, true, a value, nil + nil
    local results = {
        none = function() end,
        ["nil"] = function() return nil end,
        ["true"] = function() return true end,
        value = function() return "fine", "and more" end,
        nilnil = function() return nil, nil end,
    }
    local q = newq({
        max_retries = 0,
        handler = function(key)
            return results[key]()
        end,
    })
    for k in pairs(results) do
        q:add(k)
    end
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(q:stats().failures, 0, "none of these is a failure")
    t.eq(q:stats().succeeded, 5)
    t.eq(q:dead(), {}, "nothing dead")
end

do -- error: retries with the limiter's delays, then dead with error text and attempts
    local times = {}
    local t0
    local q = newq({
        limiter = wq.limiter.exponential(0.01, 1),
        max_retries = 3,
        handler = function(key, payload)
            times[#times + 1] = wq.now() - t0
            error("boom " .. #times)
        end,
    })
    t0 = wq.now()
    q:add("k", {p = 1})
    t.ok(t.wait_until(idle(q)), "retries finished")
    t.eq(#times, 4, "1 run + 3 retries")
    if #times == 4 then
        t.at(times[1], 0, "first run at once", 0.05)
        t.at(times[2] - times[1], 0.01, "retry 1 after base")
        t.at(times[3] - times[2], 0.02, "retry 2 after 2 * base")
        t.at(times[4] - times[3], 0.04, "retry 3 after 4 * base")
    end
    local s = q:stats()
    t.eq(s.failures, 4, "stats.failures counts every failed run")
    t.eq(s.retries, 3, "stats.retries counts the rate-limited re-adds")
    t.eq(s.dead, 1, "stats.dead")
    t.eq(s.done, 4, "every run is done")
    t.eq(q:num_requeues("k"), 0, "forgotten once dead")
    local dead = q:dead()
    t.eq(#dead, 1, "one dead letter")
    local d = dead[1] or {}
    t.eq(d.key, "k", "dead.key")
    t.eq(d.payload, {p = 1}, "dead.payload")
    t.matches(d.error, "test_handler%.lua:%d+: boom 4$", "dead.error: file:line: message of the last run")
    t.eq(d.attempts, 4, "dead.attempts = failures + 1")
    t.eq(math.type(d.attempts), "integer")
    t.eq(type(d.failed_at), "number", "dead.failed_at")
    t.ok(type(d.failed_at) == "number" and math.abs(d.failed_at - wq.time()) < 5, "failed_at is Unix time")
    t.matches(d.traceback, "stack traceback:", "dead.traceback (extra)")

    -- dying again replaces the entry
    q:add("k", "second life")
    t.ok(t.wait_until(idle(q)), "died again")
    dead = q:dead()
    t.eq(#dead, 1, "at most one entry per key")
    t.eq(dead[1] and dead[1].payload, "second life", "the new death replaced it")
    t.eq(q:stats().dead, 1)
end

do -- max_retries = 0: the first failure is final
    local runs = 0
    local q = newq({
        max_retries = 0,
        handler = function()
            runs = runs + 1
            error("once")
        end,
    })
    q:add("x")
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(runs, 1, "no retry")
    t.eq(q:dead()[1] and q:dead()[1].attempts, 1, "attempts 1")
end

do -- other failure forms: nil + error, false + error, bare false, error objects
    local forms = {
        nil_err = function() return nil, "went wrong" end,
        false_err = function() return false, "bad input" end,
        bare_false = function() return false end,
        err_table = function() error({code = 42}) end,
        err_tostring = function()
            error(setmetatable({}, {__tostring = function() return "custom error" end}))
        end,
        err_noloc = function() error("no location", 0) end,
        err_number = function() error(17) end,
        -- a __tostring that fails itself: still a failure, the process goes on
        nil_badtostring = function()
            return nil, setmetatable({}, {__tostring = function() error("broken") end})
        end,
    }
    local q = newq({
        max_retries = 0,
        handler = function(key)
            return forms[key]()
        end,
    })
    for k in pairs(forms) do
        q:add(k)
    end
    t.ok(t.wait_until(idle(q)), "processed")
    local errs = {}
    for _, d in ipairs(q:dead()) do
        errs[d.key] = d.error
    end
    t.eq(q:stats().dead, 8, "each form is a failure")
    t.eq(errs.nil_err, "went wrong", "return nil, err")
    t.eq(errs.false_err, "bad input", "return false, err")
    t.eq(type(errs.bare_false), "string", "return false has an error text")
    t.eq(errs.err_table, '{"code":42}', "error({...}) shows the table as JSON")
    t.eq(errs.err_tostring, "custom error", "__tostring of an error object is used")
    t.eq(errs.err_noloc, "no location")
    t.eq(errs.err_number, "17")
    t.matches(errs.nil_badtostring or "", "table", "a failing __tostring: named by type")
end

do -- success forgets earlier failures
    local runs = 0
    local lim = wq.limiter.exponential(0.001, 1)
    local counts = {}
    local q = newq({
        limiter = lim,
        max_retries = 5,
        handler = function(key)
            runs = runs + 1
            counts[#counts + 1] = lim:num_requeues(key)
            if runs <= 2 then
                error("transient")
            end
        end,
    })
    q:add("k")
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(runs, 3, "two failures then success")
    t.eq(counts, {0, 1, 2}, "num_requeues seen by the handler grows with failures")
    t.eq(q:num_requeues("k"), 0, "success forgot the failures")
    t.eq(q:stats().failures, 2)
    t.eq(q:stats().dead, 0)
    -- the queue's own failure count was cleared too: a new failure run gets all retries again
    runs = -100
    counts = {}
    q:add("k")
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(#counts, 6, "1 run + max_retries retries after a success reset")
    t.eq(q:stats().dead, 1)
end

do -- a bucket-only limiter (num_requeues stays 0) still bounds retries
    local runs = 0
    local q = newq({
        limiter = wq.limiter.bucket(1000, 1000),
        max_retries = 2,
        handler = function()
            runs = runs + 1
            error("always")
        end,
    })
    q:add("b")
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(runs, 3, "max_retries bounds the retries")
    t.eq(q:num_requeues("b"), 0, "bucket limiter: num_requeues is 0")
    t.eq(q:dead()[1] and q:dead()[1].attempts, 3)
end

do -- wq.requeue(s): not a failure, payload kept, delay applied
    local runs, times, payloads = 0, {}, {}
    local t0
    local lim = wq.limiter.exponential(0.001, 1)
    local q = newq({
        limiter = lim,
        max_retries = 1,
        handler = function(key, payload)
            runs = runs + 1
            times[runs] = wq.now() - t0
            payloads[runs] = payload
            if runs == 1 then
                error("one failure first")
            elseif runs < 5 then
                return wq.requeue(0.02)
            end
        end,
    })
    t0 = wq.now()
    q:add("r", {keep = "me"})
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(runs, 5, "requeued until done (a requeue is not a failure: max_retries=1 not hit)")
    t.eq(payloads[5], {keep = "me"}, "requeue keeps the payload")
    t.eq(payloads[3], {keep = "me"})
    if runs == 5 then
        t.at(times[4] - times[3], 0.02, "requeue waits its delay")
        t.at(times[5] - times[4], 0.02)
    end
    local s = q:stats()
    t.eq(s.failures, 1, "only the error counted as a failure")
    t.eq(s.dead, 0)
    t.eq(s.requeued, 3, "stats.requeued (extra)")
    t.eq(s.retries, 4, "1 rate-limited retry + 3 requeues")
    t.eq(q:num_requeues("r"), 0, "requeue clears the failure count")

    -- requeue(0) and negative delays mean now
    local r2 = 0
    local q2 = newq({
        handler = function()
            r2 = r2 + 1
            if r2 < 3 then
                return wq.requeue(r2 == 1 and 0 or -1)
            end
        end,
    })
    q2:add("z")
    t.ok(t.wait_until(idle(q2)), "processed")
    t.eq(r2, 3, "requeue(0) and requeue(-1) run again at once")
end

do -- retry_dead: back to the queue with a clean failure count; false when not dead
    local fail = true
    local runs = 0
    local q = newq({
        max_retries = 1,
        limiter = wq.limiter.exponential(0, 0),
        handler = function(key, payload)
            runs = runs + 1
            if fail then
                error("down")
            end
            t.eq(payload, {id = 9}, "retried dead item keeps its payload")
        end,
    })
    q:add("dk", {id = 9})
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(runs, 2)
    t.eq(q:stats().dead, 1)
    t.eq(q:retry_dead("nope"), false, "retry_dead of a key that is not dead")
    fail = false
    t.eq(q:retry_dead("dk"), true, "retry_dead returns true")
    t.eq(q:dead(), {}, "no longer dead")
    t.eq(q:stats().dead, 0, "stats.dead decremented")
    t.eq(q:retry_dead("dk"), false, "only once")
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(runs, 3, "ran again")

    -- a clean count: it gets all its retries again
    fail = true
    runs = 0
    q:add("dk2")
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(runs, 2)
    runs = 0
    q:retry_dead("dk2")
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(runs, 2, "1 run + max_retries after retry_dead")
    t.eq(q:dead()[1] and q:dead()[1].attempts, 2, "attempts start over")
end

do -- dead() lists oldest first, sorted
    local q = newq({
        max_retries = 0,
        handler = function()
            error("x")
        end,
    })
    q:add("z")
    t.ok(t.wait_until(idle(q)), "processed")
    wq.sleep(0.01)
    q:add("a")
    t.ok(t.wait_until(idle(q)), "processed")
    local d = q:dead()
    t.eq(#d, 2)
    t.eq(d[1] and d[1].key, "z", "oldest first")
    t.eq(d[2] and d[2].key, "a")
    d[1].key = "mutated"
    t.eq(q:dead()[1].key, "z", "dead() returns a copy")
end

do -- a handler error never crashes the process; several workers share the work
    local q = newq({
        workers = 4,
        max_retries = 0,
        handler = function(key)
            if tonumber(key) % 2 == 0 then
                error("even " .. key)
            end
            wq.sleep(0.001)
        end,
    })
    for i = 1, 40 do
        q:add(i)
    end
    t.ok(t.wait_until(idle(q)), "processed")
    local s = q:stats()
    t.eq(s.done, 40)
    t.eq(s.failures, 20)
    t.eq(s.dead, 20)
    t.eq(s.succeeded, 20)
end

do -- handlers may wait on another queue, spawn, sleep
    local results = wq.queue("h-results")
    local q = newq({
        workers = 2,
        handler = function(key)
            wq.sleep(0.001)
            results:add(key .. "!")
        end,
    })
    q:add("a")
    q:add("b")
    local got = {}
    for _ = 1, 2 do
        local k = results:get()
        got[#got + 1] = k
        results:done(k)
    end
    table.sort(got)
    t.eq(got, {"a!", "b!"}, "handlers fed another queue")
end

do -- a handler may yield plainly (coroutine.yield) and go on
    local steps = {}
    local q = newq({
        handler = function(key)
            steps[#steps + 1] = key .. "1"
            coroutine.yield()
            steps[#steps + 1] = key .. "2"
        end,
    })
    q:add("y")
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(steps, {"y1", "y2"}, "the handler continued after its yield")
    t.eq(q:stats().succeeded, 1)
end

do -- a busy queue does not starve other tasks (workers yield between jobs)
    local ticks, ticks_during = 0, nil
    local stop = false
    wq.spawn(function()
        -- runs until the last job (not until the main chunk's wait: in
        -- virtual time a task that can run keeps the clock still)
        while not stop do
            ticks = ticks + 1
            coroutine.yield()
        end
    end)
    local q = newq({
        handler = function(key)
            if key == "150" then
                ticks_during = ticks
            elseif key == "300" then
                stop = true
            end
        end,
    })
    for i = 1, 300 do
        q:add(i)
    end
    t.ok(t.wait_until(idle(q)), "processed")
    t.ok(ticks_during ~= nil and ticks_during >= 1, "another task ran while 300 jobs were processed ("
        .. tostring(ticks_during) .. " ticks by job 150)")
end

do -- several workers run items at once
    local q = newq({workers = 3, handler = function() wq.sleep(0.01) end})
    for i = 1, 3 do
        q:add(i)
    end
    wq.sleep(0.005)
    t.eq(q:stats().processing, 3, "3 workers run 3 items at once")
    t.ok(t.wait_until(idle(q)))
end

t.done()
