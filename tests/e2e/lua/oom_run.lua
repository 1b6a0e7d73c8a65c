-- One short run that touches every path an allocation can fail on, for
-- tests/e2e/test_oom_sweep.sh (which runs it with WQ_TEST_FAIL_ALLOC=N for
-- many N): queues with handlers, table payloads and group limits, wq.after / wq.every
-- timers, wq.sleep, q:add_after, a handler that fails, retries and is
-- dead-lettered, handler timeouts and wq.requeue, a get/done loop and
-- shutdown_with_drain, wq.exec (with stdin and env), HTTP posts to its own
-- listener, inbox rows from `wqrun add`, GET /metrics and /queues, and the
-- restore of what the previous run left in the state file. It ends
-- itself with wq.exit(0) once every expected item ran, or raises (exit 1)
-- when something is missing after the time limit.
--
--   WQRUN=path/to/wqrun wqrun --quiet --db DB --listen 127.0.0.1:PORT oom_run.lua PORT DB [LIMIT]
local cjson = require "cjson"

local port = assert(tonumber(arg[1]), "usage: oom_run.lua PORT DB [LIMIT]")
local db = assert(arg[2], "usage: oom_run.lua PORT DB [LIMIT]")
local limit = tonumber(arg[3]) or 5
local wqrun = assert(os.getenv("WQRUN"), "WQRUN must name the wqrun binary")
local base = "http://127.0.0.1:" .. port
local t0 = wq.now()

-- Every key "jobs" must run, and what its payload must say.
local expected = {}
local seen, nseen = {}, 0

-- A burst of timers made by a handler (a failure there is a job failure:
-- the process goes on, and so do the timers it made). Done when none is
-- pending any more (a callback may be skipped for want of memory).
local BURST = 40
local burst, burst_fired = {}, 0
local function burst_pending()
    for _, tm in ipairs(burst) do
        if tm:pending() then return true end
    end
    return #burst < BURST
end

local jobs = wq.queue("jobs", {
    workers = 2,
    -- groups (and their allocations) on the path of every add and get
    group_of = function(key) return "g" .. (#key % 3) end,
    group_limit = {concurrency = 2, rate = 10000},
    handler = function(key, payload)
        if type(payload) ~= "table" or payload.key ~= key then
            error("jobs: " .. key .. ": wrong payload " .. cjson.encode(payload))
        end
        if payload.nap then wq.sleep(payload.nap) end
        if payload.burst then
            for _ = 1, BURST do
                burst[#burst + 1] = wq.after(0.001, function() burst_fired = burst_fired + 1 end)
            end
        end
        if not seen[key] then
            seen[key] = true
            nseen = nseen + 1
        end
    end,
})

-- "bad" always fails (dead after 3 runs), "once" fails only its first run.
local runs = {}
local flaky = wq.queue("flaky", {
    max_retries = 2,
    limiter = wq.limiter.with_max_wait(wq.limiter.max_of(wq.limiter.exponential(0.001, 0.1),
                                                         wq.limiter.bucket(1000, 100)), 0.004),
    handler = function(key)
        runs[key] = (runs[key] or 0) + 1
        if key == "bad" or runs[key] == 1 then error("planned failure of " .. key) end
    end,
})

-- Handlers stopped by their timeout, waiting ("sleepy") or computing
-- ("spin"), and one that asks to be run again ("poll", wq.requeue).
local polls = 0
local slow = wq.queue("slow", {
    timeout = 0.01,
    max_retries = 0,
    handler = function(key)
        if key == "sleepy" then wq.sleep(10) end
        if key == "spin" then while true do end end
        if key == "poll" then
            polls = polls + 1
            if polls < 3 then return wq.requeue(0.002) end
        end
    end,
})

-- No handler: a task of the script's own takes its items (get/done), then
-- shuts it down with drain.
local manual = wq.queue("manual", {persist = false})
local taken = 0

local function payload(key, extra)
    local p = {key = key, tags = {"a", "b"}, n = #key}
    for k, v in pairs(extra or {}) do p[k] = v end
    return p
end

-- State left in the file for the next run (the sweep starts each run from
-- what a run without failures left, so restoring is part of it too): a
-- queued and a delayed item, a key waiting an hour for its retry with a
-- failure count, and the dead letter of "bad".
local held = wq.queue("held")
local stuck = wq.queue("stuck", {
    limiter = wq.limiter.exponential(3600, 3600),
    handler = function() error("planned failure, retried in an hour") end,
})
local h, st, dead = held:stats(), stuck:stats(), flaky:dead()
local restored = h.queued + h.waiting + st.retrying + st.waiting + #dead > 0
if restored then
    -- Part of it missing: wqrun lost state without saying so (the sweep
    -- test looks for "LOST").
    if h.queued ~= 1 or h.waiting ~= 1 or st.retrying ~= 1 or st.waiting ~= 1 or #dead ~= 1 or
        dead[1].payload.why ~= "always fails" then
        error(string.format("LOST in the restore: held %d+%d, stuck %d+%d, dead %d", h.queued,
                            h.waiting, st.retrying, st.waiting, #dead))
    end
else
    held:add("h-1", payload("h-1"))
    held:add_after("h-2", 3600, payload("h-2"))
    stuck:add("s", payload("s"))
end

local function expect(key)
    expected[#expected + 1] = key
    return key
end

-- Runs argv and returns its stdout; raises when it cannot run or fails.
local function run(argv, opts)
    opts = opts or {}
    opts.timeout = limit
    local r, err = wq.exec(argv, opts)
    if not r then error(err) end
    if r.status ~= 0 then
        error(string.format("%s exited with %s: %s", argv[1], tostring(r.status or r.signal),
                            r.stderr))
    end
    return r.stdout
end

-- The script's own adds, with table payloads, now and delayed.
for i = 1, 4 do
    local k = expect("add-" .. i)
    jobs:add(k, payload(k, {nap = i == 1 and 0.005 or nil, burst = i == 2 or nil}))
end
for i = 1, 2 do
    local k = expect("later-" .. i)
    jobs:add_after(k, 0.01 * i, payload(k))
end
flaky:add("bad", {why = "always fails"})
flaky:add("once")
slow:add("sleepy")
slow:add("spin")
slow:add("poll", "a string payload", {priority = 3})
for i = 1, 3 do manual:add("m-" .. i, {i = i}) end
wq.spawn(function()
    while taken < 3 do
        local key, p = manual:get()
        if key ~= "m-" .. p.i then error("manual: " .. key .. " with " .. cjson.encode(p)) end
        taken = taken + 1
        manual:done(key)
    end
    manual:shutdown_with_drain()
end)

-- Timers: a one-shot and a periodic one that stops itself after 3 ticks.
local after_key = expect("after")
local fired = false
local one = wq.after(0.01, function()
    fired = true
    jobs:add(after_key, payload(after_key))
end)
local ticks = 0
for i = 1, 3 do expect("tick-" .. i) end
local every
every = wq.every(0.01, function()
    ticks = ticks + 1
    if ticks <= 3 then jobs:add("tick-" .. ticks, payload("tick-" .. ticks)) end
    if ticks >= 3 then every:cancel() end
end)

-- HTTP posts to our own listener, inbox rows, a tiny program: each in a task.
for i = 1, 2 do
    local k = expect("http-" .. i)
    wq.spawn(function()
        local body = cjson.encode({key = k, payload = payload(k), after = (i - 1) * 0.005,
                                   priority = i})
        local out = run({"curl", "-s", "-m", tostring(limit), "-X", "POST", "-d", body,
                         base .. "/queues/jobs/items"})
        if not out:find('"queued":true', 1, true) then error("POST " .. k .. ": " .. out) end
    end)
end
for i = 1, 2 do
    local k = expect("inbox-" .. i)
    wq.spawn(function()
        run({wqrun, "add", "--db", db, "jobs", k, cjson.encode(payload(k)), "--after",
             tostring((i - 1) * 0.005)})
    end)
end
wq.spawn(function() run({"true"}) end)
wq.spawn(function()
    local out = run({"sh", "-c", 'cat; printf " %s" "$OOM_RUN"'},
                    {stdin = "in", env = {OOM_RUN = "env", HOME = false}})
    if out ~= "in env" then error("sh: " .. out) end
end)

-- Wait for everything; a timer callback that was skipped (its task could not
-- be made) is a failure the script reports soon (a callback that fired runs
-- in the scheduler's next pass, before this loop looks twice).
local unfired = 0
while true do
    local s, w, st = flaky:stats(), slow:stats(), stuck:stats()
    -- A handler that fails for want of memory is a job failure like any
    -- other: with max_retries = 0, any of the three keys of "slow" may die.
    if nseen == #expected and s.dead == 1 and s.succeeded == 1 and
        s.queued + s.processing + s.waiting == 0 and st.retrying == 1 and st.waiting == 1 and
        w.dead + w.succeeded == 3 and w.processing + w.waiting == 0 and taken == 3 and
        manual:shutting_down() and not burst_pending() then
        break
    end
    if not one:pending() and not fired then
        unfired = unfired + 1
        if unfired > 2 then error("the wq.after callback did not run") end
    end
    if wq.now() - t0 > limit then
        local missing = {}
        for _, k in ipairs(expected) do
            if not seen[k] then missing[#missing + 1] = k end
        end
        error(string.format("time limit: jobs missing %s; flaky dead %d, succeeded %d; " ..
                                "slow dead %d, timeouts %d, requeued %d, succeeded %d; " ..
                                "taken %d; burst %d of %d; stuck %d+%d",
                            table.concat(missing, " "), s.dead, s.succeeded, w.dead, w.timeouts,
                            w.requeued, w.succeeded, taken, burst_fired, #burst, st.retrying,
                            st.waiting))
    end
    wq.sleep(0.002)
end

local metrics = run({"curl", "-s", "-m", tostring(limit), base .. "/metrics"})
if not metrics:find('workqueue_adds_total{name="jobs"}', 1, true) then
    error("GET /metrics: " .. metrics:sub(1, 200))
end
-- Not cjson.decode: it leaks its buffer when an allocation fails inside it.
local queues = run({"curl", "-s", "-m", tostring(limit), base .. "/queues"})
if not queues:find('"name":"jobs"', 1, true) or not queues:find('"name":"manual"', 1, true) then
    error("GET /queues: " .. queues:sub(1, 200))
end
local dead = flaky:dead()
if #dead ~= 1 or dead[1].key ~= "bad" or dead[1].payload.why ~= "always fails" then
    error("dead letters: " .. cjson.encode(dead))
end

local w = slow:stats()
print(string.format("oom_run: ok jobs %d flaky dead %d succeeded %d runs %d slow dead %d " ..
                        "timeouts %d requeued %d succeeded %d burst %d %s in %.3fs", nseen,
                    flaky:stats().dead, flaky:stats().succeeded, runs.bad + runs.once, w.dead,
                    w.timeouts, w.requeued, w.succeeded, burst_fired,
                    restored and "restored" or "fresh", wq.now() - t0))
wq.exit(0)
