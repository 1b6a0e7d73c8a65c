-- backends: all
-- The work-queue rules of WORKQUEUE.md and SPEC 3 / 7.1 that show through
-- handler workers and the values add returns, on every backend (memory or
-- SQLite as lua_test_semantics, PostgreSQL as lua_pg_test_semantics). Only
-- what a handler sees is checked: no q:len() or q:stats() (on PostgreSQL
-- they count only what this runner claimed), no q:dead() (not there yet on
-- PostgreSQL: on_dead shows the dead letters). Real time, small delays.
local t = require "wqtest"
t.watchdog(60)

-- exported by tests/lua/run_pg.sh; branch on it only where the semantics differ
local pg = os.getenv("WQ_BACKEND") == "pg"

-- A delayed run (add_after, a retry, a requeue) at its time: never early, and
-- on time within t.at's slack.
local function at_delay(actual, expected, msg)
    return t.at(actual, expected, msg)
end

local function wait_for(cond, what, timeout)
    return t.ok(t.wait_until(cond, timeout or 5), what)
end

-- A gate: a key whose handler holds the queue's only worker until opened,
-- so that the adds after it are all committed before anything is handed out.
local function gate()
    local g = {running = false, open = false}
    function g.hold()
        g.running = true
        while not g.open do
            wq.sleep(0.005)
        end
    end
    return g
end

do -- dedup of a queued key: one run, the last payload; an add without one keeps it
    local g = gate()
    local runs = {}
    local q = wq.queue("dedup", {workers = 1, handler = function(key, payload)
        if key == "gate" then
            return g.hold()
        end
        runs[#runs + 1] = {key, payload}
    end})
    t.eq(q:add("gate"), true)
    wait_for(function() return g.running end, "the gate runs")
    t.eq(q:add("x", "p1"), true, "queued")
    t.eq(q:add("y", {n = 1}), true)
    t.eq(q:add("x", "p2"), true, "deduplicated: still true")
    t.eq(q:add("x"), true, "without a payload")
    t.eq(q:add("y"), true)
    t.eq(q:add(7, "seven"), true, "a number key")
    t.eq(q:add("7"), true, "the same key as 7")
    g.open = true
    wait_for(function() return #runs >= 3 end, "the queued keys ran")
    wq.sleep(0.3) -- nothing more comes
    t.eq(runs, {{"x", "p2"}, {"y", {n = 1}}, {"7", "seven"}},
         "each queued key runs once, FIFO, with the newest payload (an add without one keeps it)")
end

do -- the follow-up rule: adds while it runs -> exactly one more run, after, with the newest payload
    local runs, active, overlap = {}, 0, false
    local started, release = false, false
    local q = wq.queue("follow", {workers = 4, handler = function(key, payload)
        active = active + 1
        overlap = overlap or active > 1
        runs[#runs + 1] = {payload, wq.now()}
        if #runs == 1 then
            started = true
            while not release do
                wq.sleep(0.005)
            end
        end
        active = active - 1
        runs[#runs][3] = wq.now()
    end})
    t.eq(q:add("f", "v1"), true)
    wait_for(function() return started end, "the first run started")
    t.eq(q:add("f", "v2"), true, "an add while it runs (follow-up)")
    t.eq(q:add("f", "v3"), true)
    t.eq(q:add("f"), true, "no payload: v3 stays")
    wq.sleep(0.1)
    t.eq(#runs, 1, "not handed out again while it runs, though 3 workers are free")
    release = true
    wait_for(function() return #runs >= 2 and runs[2][3] end, "the follow-up ran")
    wq.sleep(0.3)
    t.eq(#runs, 2, "exactly one more run")
    t.eq(runs[1][1], "v1")
    t.eq(runs[2] and runs[2][1], "v3", "the follow-up has the newest payload")
    t.ok(runs[2] and runs[2][2] >= runs[1][3], "the second run starts after the first ended")
    t.eq(overlap, false, "never two runs of f at once")

    -- an add from inside its own handler is a follow-up too
    do
        local n = 0
        local q2
        q2 = wq.queue("follow-self", {handler = function(key, payload)
            n = n + 1
            if n == 1 then
                t.eq(q2:add(key, "again"), true, "add from its own handler")
                t.eq(q2:add(key), true)
            else
                t.eq(payload, "again", "the follow-up of its own add")
            end
        end})
        q2:add("s", "first")
        wait_for(function() return n >= 2 end, "ran again")
        wq.sleep(0.3)
        t.eq(n, 2, "one more run, not two")
    end
end

do -- add_after: the earliest time wins; <= 0 means now; Add does not cancel a pending AddAfter
    local t0 = wq.now()
    local seen = {}
    local q = wq.queue("delay", {workers = 4, handler = function(key, payload)
        seen[key] = seen[key] or {}
        table.insert(seen[key], {wq.now() - t0, payload})
    end})
    t.eq(q:add_after("e", 0.3, "late"), true, "delayed")
    t.eq(q:add_after("e", 0.1, "early"), true, "an earlier time replaces")
    t.eq(q:add_after("e", 0.5), true, "a later time is ignored")
    t.eq(q:add_after("now0", 0, "zero"), true, "0 adds now")
    t.eq(q:add_after("now-", -1), true, "< 0 adds now")
    t.eq(q:add_after("both", 0.2, "delayed one"), true)
    t.eq(q:add("both", "queued one"), true, "an add beside a pending add_after")
    wait_for(function() return seen.e and seen.both and #seen.both >= 2 end, "all ran", 3)
    wq.sleep(0.3) -- past every time given (0.5 s) and then some
    local function times(k)
        local r = {}
        for i, s in ipairs(seen[k] or {}) do
            r[i] = s[1]
        end
        return r
    end
    t.eq(#(seen.now0 or {}), 1)
    t.at(times("now0")[1] or -1, 0, "add_after 0 runs at once", 0.1)
    t.eq(#(seen["now-"] or {}), 1)
    t.at(times("now-")[1] or -1, 0, "add_after < 0 runs at once", 0.1)
    t.eq(#(seen.e or {}), 1, "one waiting entry per key: one run")
    at_delay(times("e")[1] or -1, 0.1, "at the earliest time given")
    t.eq(seen.e and seen.e[1][2], "early", "with the last payload given")
    t.eq(#(seen.both or {}), 2, "Add(x) does not cancel AddAfter(x, d): runs now and again later")
    t.at(times("both")[1] or -1, 0, "now", 0.1)
    at_delay(times("both")[2] or -1, 0.2, "and after the delay")
    -- a key carries one payload while anything is pending for it: the last one given
    t.eq(seen.both and seen.both[1][2], "queued one")
    t.eq(seen.both and seen.both[2] and seen.both[2][2], "queued one")
end

do -- priorities: higher first, FIFO within a level; a re-add can raise a queued key, never lower it
    local g = gate()
    local order = {}
    local q = wq.queue("prio", {workers = 1, handler = function(key)
        if key == "gate" then
            return g.hold()
        end
        order[#order + 1] = key
    end})
    q:add("gate")
    wait_for(function() return g.running end, "the gate runs")
    q:add("low1")
    q:add("high", nil, {priority = 5})
    q:add("low2", nil, {priority = 0})
    q:add("mid", nil, {priority = 2})
    q:add("low3")
    q:add("top", nil, {priority = 9})
    q:add("neg", nil, {priority = -3})
    q:add("low4")
    t.eq(q:add("low3", nil, {priority = 9}), true, "raise a queued key")
    t.eq(q:add("high", nil, {priority = 1}), true, "a lower priority is ignored")
    t.eq(q:add("low2"), true, "no priority given: kept")
    g.open = true
    wait_for(function() return #order >= 8 end, "all ran")
    wq.sleep(0.2)
    t.eq(order, {"top", "low3", "high", "mid", "low1", "low2", "low4", "neg"},
         "priority, then FIFO; a raised key goes to the back of its new level")
end

do -- failures: retries through the limiter with job.attempt 1, 2, 3, then a dead letter
    local runs, dead = {}, {}
    local q = wq.queue("retry", {
        limiter = wq.limiter.exponential(0.05, 1),
        max_retries = 2,
        on_dead = function(key, payload, err, attempts)
            dead[#dead + 1] = {key = key, payload = payload, err = err, attempts = attempts}
        end,
        handler = function(key, payload, job)
            runs[#runs + 1] = {attempt = job.attempt, at = wq.now(), payload = payload,
                               enqueued_at = job.enqueued_at}
            error("boom " .. job.attempt)
        end,
    })
    local before = wq.time()
    q:add("r", {p = 1})
    wait_for(function() return #dead >= 1 end, "dead-lettered", 5)
    wq.sleep(0.3)
    t.eq(#runs, 3, "1 run + max_retries (2) retries")
    local attempts, payloads = {}, {}
    for i, r in ipairs(runs) do
        attempts[i] = r.attempt
        payloads[i] = r.payload
    end
    t.eq(attempts, {1, 2, 3}, "job.attempt counts the runs")
    t.eq(payloads, {{p = 1}, {p = 1}, {p = 1}}, "retries keep the payload")
    if #runs == 3 then
        -- exponential(0.05): 0.05 s before the first retry, 0.1 s before the second
        at_delay(runs[2].at - runs[1].at, 0.05, "retry 1 waits the limiter's 0.05 s")
        at_delay(runs[3].at - runs[2].at, 0.1, "retry 2 waits 0.1 s")
        t.between(runs[1].enqueued_at, before - 0.01, wq.time(), "enqueued_at is when it was added")
        t.eq(runs[2].enqueued_at, runs[1].enqueued_at, "enqueued_at is kept across a retry")
        t.eq(runs[3].enqueued_at, runs[1].enqueued_at)
    end
    t.eq(#dead, 1, "one dead letter")
    local d = dead[1] or {}
    t.eq(d.key, "r")
    t.eq(d.payload, {p = 1})
    t.matches(d.err, "boom 3", "the last run's error")
    t.eq(d.attempts, 3, "attempts = the number of runs")
end

do -- a retry that then succeeds; wq.fail dead at once whatever max_retries says
    local runs, dead = {}, {}
    local q = wq.queue("fail", {
        limiter = wq.limiter.exponential(0.05, 1),
        max_retries = 5,
        on_dead = function(key, payload, err, attempts)
            dead[#dead + 1] = {key, err, attempts}
        end,
        handler = function(key, payload, job)
            runs[key] = (runs[key] or 0) + 1
            if key == "returned" then
                return wq.fail("no such page")
            elseif key == "raised" then
                error(wq.fail("gone for good"))
            elseif key == "flaky" and job.attempt < 2 then
                return nil, "not yet"
            end
        end,
    })
    q:add("returned")
    q:add("raised")
    q:add("flaky")
    wait_for(function() return #dead >= 2 and (runs.flaky or 0) >= 2 end, "all finished")
    wq.sleep(0.3)
    t.eq(runs, {returned = 1, raised = 1, flaky = 2}, "wq.fail is never retried; flaky: one retry")
    table.sort(dead, function(a, b) return a[1] < b[1] end)
    t.eq(#dead, 2, "two dead letters")
    t.eq(dead[1] and dead[1][1], "raised")
    t.matches(dead[1] and dead[1][2], "gone for good")
    t.eq(dead[1] and dead[1][3], 1, "dead at the first attempt")
    t.eq(dead[2] and dead[2][1], "returned")
    t.matches(dead[2] and dead[2][2], "no such page")
    t.eq(dead[2] and dead[2][3], 1)
end

do -- wq.requeue(s) and wq.requeue(s, payload): again after s, not a failure
    local runs = {}
    local q = wq.queue("requeue", {workers = 2, max_retries = 0, handler = function(key, payload, job)
        runs[key] = runs[key] or {}
        local r = runs[key]
        r[#r + 1] = {at = wq.now(), payload = payload, attempt = job.attempt}
        if #r == 1 then
            if key == "same" then
                return wq.requeue(0.1)
            end
            return wq.requeue(0.15, {step = 2})
        elseif #r == 2 and key == "same" then
            return wq.requeue(0) -- <= 0: now
        end
    end})
    q:add("same", "keep me")
    q:add("new", {step = 1})
    wait_for(function()
        return runs.same and #runs.same >= 3 and runs.new and #runs.new >= 2
    end, "requeued runs happened")
    wq.sleep(0.3)
    local s, n = runs.same or {}, runs.new or {}
    t.eq(#s, 3, "same: requeued twice, so three runs (max_retries 0: requeue is no failure)")
    t.eq(#n, 2, "new: two runs")
    t.eq({s[1] and s[1].payload, s[2] and s[2].payload, s[3] and s[3].payload},
         {"keep me", "keep me", "keep me"}, "requeue without a payload keeps it")
    t.eq({n[1] and n[1].payload, n[2] and n[2].payload}, {{step = 1}, {step = 2}},
         "requeue with a payload replaces it")
    t.eq({s[1] and s[1].attempt, s[2] and s[2].attempt, s[3] and s[3].attempt}, {1, 1, 1},
         "a requeue is not a failure: attempt stays 1")
    if #s == 3 and #n == 2 then
        at_delay(s[2].at - s[1].at, 0.1, "requeue(0.1) waits 0.1 s")
        t.at(s[3].at - s[2].at, 0, "requeue(0) is now", 0.1)
        at_delay(n[2].at - n[1].at, 0.15, "requeue(0.15, payload) waits 0.15 s")
    end
end

t.done()
