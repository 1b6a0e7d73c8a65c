-- backends: all
-- A job's life (SPEC 11): q:wait(key [, timeout]) returns a run's end (done,
-- dead, cancelled, removed) without polling, or at the timeout the key's
-- state now; job:progress(value) shows in q:item and q:items while the job
-- runs and goes with it; bad values raise naming the argument.
local t = require "wqtest"
t.watchdog(60)

local gate = {}
local seen = {}
local q = wq.queue("life", {workers = 4, max_retries = 1,
    limiter = wq.limiter.exponential(0.02, 0.02), handler = function(key, payload, job)
    seen[key] = job.key
    if payload and payload.progress then job:progress(payload.progress) end
    while gate[key] do wq.sleep(0.01) end
    if key == "bad" then error("boom") end
    if key == "fail" then return wq.fail("no") end
    return {ok = key, attempt = job.attempt}
end})

-- done: the result, the attempt count, the times, the runner
q:add("a")
local r = q:wait("a", 10)
t.eq(r.state, "done", "a run that succeeds")
t.eq(r.key, "a")
t.eq(r.result, {ok = "a", attempt = 1}, "its result")
t.eq(r.attempts, 1)
t.ok(r.finished_at >= r.started_at and r.started_at >= r.added_at, "added <= started <= finished")
t.ok(type(r.runner) == "string" and #r.runner > 0, "the runner that ran it")
t.eq(seen.a, "a", "job.key is the key")

-- dead after its retry: the error, two attempts
q:add("bad")
r = q:wait("bad", 10)
t.eq(r.state, "dead", "retries exhausted")
t.eq(r.attempts, 2, "the first run and its retry")
t.matches(r.error, "boom")
q:add("fail")
t.eq(q:wait("fail", 10).state, "dead", "wq.fail dead-letters at once")

-- the timeout gives the state now; the end comes later to another wait
gate.slow = true
q:add("slow", {progress = 10})
t.wait_until(function() local i = q:item("slow"); return i and i.state == "processing" end, 10)
local t0 = wq.now()
r = q:wait("slow", 0.2)
t.eq(r.state, "processing", "at the timeout: its state now")
t.ok(wq.now() - t0 >= 0.19, "waited the timeout out")
t.eq(q:wait("slow", 0).state, "processing", "a timeout of 0 only looks")

-- progress: in q:item and q:items while it runs
t.eq(q:item("slow").progress, 10, "the progress the handler gave")
local listed
for _, it in ipairs(q:items()) do if it.key == "slow" then listed = it end end
t.eq(listed and listed.progress, 10, "q:items shows it")

-- a second waiter and the cancel end it for both
local other
wq.spawn(function() other = q:wait("slow") end)
wq.sleep(0.05)
q:cancel("slow")
r = q:wait("slow", 10)
t.ok(r.state == "cancelled" or (r.state == nil), "the cancel ends the run")
t.wait_until(function() return other ~= nil end, 10)
t.eq(other.state, "cancelled", "the other waiter heard the cancel")
gate.slow = nil
local gone = q:item("slow") -- nil, or its last run from the history (PostgreSQL)
t.eq(gone and gone.progress, nil, "the progress went with the run")
t.ok(not gone or gone.state == "cancelled", "it is not pending")

-- removed while waiting to run
q:add_after("later", 30)
wq.spawn(function() wq.sleep(0.05); q:remove("later") end)
r = q:wait("later", 10)
t.eq(r.state, "removed", "a remove ends a pending key")

-- a key never added: q:item's answer (nil)
t.eq(q:wait("never"), nil, "nothing to wait for")

-- bad values for job:progress raise naming the argument; after the end it raises
local errs = {}
local pq = wq.queue("life_progress", {handler = function(key, payload, job)
    for _, v in ipairs({-1, 101, 0 / 0, "half", true}) do
        local ok, e = pcall(job.progress, job, v)
        errs[#errs + 1] = ok and "accepted" or e
    end
    local ok, e = pcall(job.progress, job, {s = string.rep("x", 2000)})
    errs[#errs + 1] = ok and "accepted" or e
    local ok2, e2 = pcall(job.progress, {}, 5)
    errs[#errs + 1] = ok2 and "accepted" or e2
    job:progress(0)
    job:progress(100)
    job:progress({step = "copy", n = 3})
    return job
end})
pq:add("p")
r = pq:wait("p", 10)
t.eq(r.state, "done")
t.eq(#errs, 7)
for i = 1, 5 do
    t.matches(errs[i], "progress: bad argument 'value' (a number from 0 to 100 or a table expected")
end
t.matches(errs[6], "at most 1024 bytes")
t.matches(errs[7], "progress: bad argument 'self'")

local late
local lq = wq.queue("life_late", {handler = function(key, payload, job) late = job end})
lq:add("x")
t.eq(lq:wait("x", 10).state, "done")
t.raises(function() late:progress(50) end, "progress: the job has ended")

t.raises(function() q:wait() end, "wait: bad argument 'key'")
t.raises(function() q:wait("a", -1) end, "wait: bad argument 'timeout'")
t.done()
