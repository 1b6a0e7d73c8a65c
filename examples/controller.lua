-- controller.lua: a Kubernetes-style controller loop, written the way
-- client-go's sample-controller is: an informer puts the keys of changed
-- objects on a rate-limited work queue, and worker tasks run
--
--     key = q:get()                      -- processNextWorkItem
--     ok = reconcile(key)
--     if ok then q:forget(key)           -- success: reset the backoff
--     elseif q:num_requeues(key) < 5 then q:add_rate_limited(key)
--     else q:forget(key) end             -- give up (until the next change)
--     q:done(key)
--
-- The queue has no handler: the workers are ordinary tasks from wq.spawn
-- that call get/done themselves. The "cluster" is simulated: each
-- deployment has a desired and an actual replica count, and the API that
-- scales it is slow and fails a third of the time (conflicts, timeouts),
-- so the retries and their exponential backoff are visible in the log.
-- Users edit the desired state for a few seconds; once every deployment
-- has converged, the controller stops with q:shutdown_with_drain(), the
-- workers see get() return nil and exit, and the final state is printed.
--
--   build/wqrun examples/controller.lua [SEED]
--   build/wqrun --virtual-time examples/controller.lua   # same run, instantly
--
-- Takes about 3 seconds. SEED (default 1) picks the API's failures.

math.randomseed(tonumber(arg[1]) or 1)

-- ---- the simulated cluster ----

local desired, actual = {}, {}
local names = {"api", "web", "worker", "cache", "search", "billing", "mailer", "auth"}
for i, name in ipairs(names) do
    desired[name] = 1 + i % 3
    actual[name] = 0
end

local api_calls, api_errors = 0, 0
local on_update -- set by the informer below

-- The API: scales a deployment by at most 2 replicas per call, after some
-- latency; fails now and then like a real API server would.
local function api_scale(name, replicas)
    api_calls = api_calls + 1
    wq.sleep(0.02 + math.random() * 0.08)
    local r = math.random()
    if r < 0.2 then
        api_errors = api_errors + 1
        return nil, "Operation cannot be fulfilled: the object has been modified"
    elseif r < 0.33 then
        api_errors = api_errors + 1
        return nil, "the server was unable to return a response in the time allotted"
    end
    local cur = actual[name]
    local step = math.max(-2, math.min(2, replicas - cur))
    actual[name] = cur + step
    if step ~= 0 and on_update then on_update(name) end -- the watch sees the change
    return actual[name]
end

-- ---- the controller ----

-- client-go's DefaultControllerRateLimiter is
-- max_of(exponential(0.005, 1000), bucket(10, 100)); a demo wants a faster
-- per-item backoff and the same kind of overall bucket.
local q = wq.queue("deployments", {
    limiter = wq.limiter.max_of(wq.limiter.exponential(0.05, 2), wq.limiter.bucket(20, 50)),
})

-- One pass of the reconcile loop for one key: move the actual state one
-- step toward the desired one. Returns true on success (the update comes
-- back through the watch and queues the key again if more is needed), or
-- false and the API's error.
local function reconcile(name)
    local want = desired[name]
    if want == nil or actual[name] == want then return true end
    local got, err = api_scale(name, want)
    if not got then return false, err end
    wq.log("%-8s scaled to %d (want %d)", name, got, want)
    return true
end

local MAX_REQUEUES = 5

local function process_next_work_item(id)
    local name = q:get()
    if name == nil then return false end -- shut down and empty
    local ok, err = reconcile(name)
    if ok then
        q:forget(name)
    elseif q:num_requeues(name) < MAX_REQUEUES then
        wq.log("%-8s worker %d: %s (retry #%d)", name, id, err, q:num_requeues(name) + 1)
        q:add_rate_limited(name)
    else
        wq.log("%-8s dropped after %d retries: %s", name, MAX_REQUEUES, err)
        q:forget(name)
    end
    q:done(name)
    return true
end

local WORKERS = 3
local running = WORKERS
for id = 1, WORKERS do
    wq.spawn(function()
        while process_next_work_item(id) do end
        running = running - 1
    end)
end

-- ---- the informer: every change of an object enqueues its key ----

-- While a worker is processing a key, adding it again only marks it: it is
-- queued once more after q:done, never handed to a second worker.
on_update = function(name) q:add(name) end

local function set_desired(name, replicas)
    desired[name] = replicas
    q:add(name) -- a key already queued is not queued twice
end

for _, name in ipairs(names) do q:add(name) end -- initial list

-- A resync, as informers do: every key again now and then, so a key that
-- was dropped after MAX_REQUEUES is picked up later.
local resync = wq.every(2, function()
    for _, name in ipairs(names) do q:add(name) end
end)

-- Users edit the desired state for a few seconds.
wq.sleep(1)
set_desired("web", 7)
set_desired("api", 4)
wq.sleep(1)
set_desired("web", 3) -- changed again before it converged
set_desired("cache", 0)
wq.sleep(0.5)
desired.mailer = nil -- deleted
actual.mailer = nil
q:add("mailer")

-- Wait until the actual state matches, then stop the controller.
local function converged()
    for name, want in pairs(desired) do
        if actual[name] ~= want then return false end
    end
    return true
end
local deadline = wq.now() + 60
while not converged() or q:len() > 0 do
    if wq.now() > deadline then error("did not converge within 60 s") end
    wq.sleep(0.1)
end
resync:cancel()
q:shutdown_with_drain() -- no new items; waits for the keys being processed
while running > 0 do wq.sleep(0.01) end -- the workers saw get() return nil

print(("%-8s %8s %8s"):format("name", "desired", "actual"))
for _, name in ipairs(names) do
    if desired[name] then
        print(("%-8s %8d %8d"):format(name, desired[name], actual[name]))
    end
end
local s = q:stats()
print(("%d API calls, %d failed; %d adds, %d rate-limited retries; converged: %s")
    :format(api_calls, api_errors, s.adds, s.retries, tostring(converged())))
