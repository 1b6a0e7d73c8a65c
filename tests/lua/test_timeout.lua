-- Handler timeouts: a sleeping handler, one waiting on wq.exec (the child
-- is killed) and one stuck in a pure-Lua loop each fail with "timeout", and
-- the queue keeps working. A handler cannot swallow its timeout with pcall.
local t = require "wqtest"

local n = 0
local function newq(opts)
    n = n + 1
    opts.max_retries = opts.max_retries or 0
    return wq.queue("to" .. n, opts)
end

local function idle(q)
    return function()
        local s = q:stats()
        return s.depth == 0 and s.processing == 0 and s.waiting == 0
    end
end

local function dead_errors(q)
    local r = {}
    for _, d in ipairs(q:dead()) do
        r[d.key] = d.error
    end
    return r
end

local function read_file(path)
    local f = io.open(path)
    if not f then
        return nil
    end
    local s = f:read("a")
    f:close()
    return s
end

-- true once /proc/<pid> is gone (or is not a zombie of ours any more)
local function process_gone(pid)
    local stat = read_file("/proc/" .. pid .. "/stat")
    return stat == nil
end

do -- a sleeping handler
    local finished = false
    local t0, failed_after
    local q = newq({
        timeout = 0.05,
        handler = function(key)
            if key == "sleeper" then
                wq.sleep(10)
                finished = true
            end
        end,
    })
    t0 = wq.now()
    q:add("sleeper")
    t.ok(t.wait_until(idle(q), 5), "the sleeping handler was stopped")
    failed_after = wq.now() - t0
    t.eq(finished, false, "the code after the sleep never ran")
    t.eq(dead_errors(q).sleeper, "timeout", "error text is 'timeout'")
    t.at(failed_after, 0.05, "failed at its timeout", 0.3)
    t.eq(q:stats().timeouts, 1, "stats.timeouts (extra)")
    -- the queue keeps working, and quick jobs are not affected by the timeout
    q:add("quick1")
    q:add("quick2")
    t.ok(t.wait_until(idle(q)), "later jobs run")
    t.eq(q:stats().succeeded, 2, "quick jobs succeeded")
    t.eq(q:stats().dead, 1)
end

do -- each job gets its own deadline; a finished job's deadline never fires later
    local runs = 0
    local q = newq({
        timeout = 0.05,
        handler = function()
            runs = runs + 1
            wq.sleep(0.03)
        end,
    })
    for i = 1, 4 do
        q:add(i)
    end
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(runs, 4)
    t.eq(q:stats().failures, 0, "0.03 s jobs under a 0.05 s timeout, back to back: no timeout")
    wq.sleep(0.08) -- the worker now waits in get past the old deadlines
    q:add("after-idle")
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(q:stats().failures, 0, "no stale timeout hit the idle worker")
    t.eq(runs, 5)
end

do -- a pure-Lua infinite loop (in real time even under --virtual-time)
    local q = newq({
        timeout = 0.05,
        handler = function(key)
            if key == "spin" then
                local x = 0
                while true do
                    x = x + 1
                end
            end
        end,
    })
    local w0 = os.time()
    q:add("spin")
    q:add("next")
    t.ok(t.wait_until(idle(q), 10), "the looping handler was stopped")
    t.ok(os.time() - w0 <= 3, "quickly")
    t.eq(dead_errors(q).spin, "timeout", "loop fails with 'timeout'")
    t.eq(q:stats().succeeded, 1, "the next job ran")
end

do -- pcall cannot swallow a timeout (loop or wait), and the handler cannot go on
    local after = {}
    local q = newq({
        timeout = 0.05,
        handler = function(key)
            if key == "pcall-loop" then
                pcall(function()
                    while true do
                    end
                end)
                after[key] = true
                while true do
                end
            elseif key == "pcall-sleep" then
                local ok, err = pcall(wq.sleep, 10)
                after[key] = {ok, err}
                return "success?"
            elseif key == "pcall-repeat" then
                while true do
                    pcall(function()
                        while true do
                        end
                    end)
                end
            end
        end,
    })
    q:add("pcall-loop")
    q:add("pcall-sleep")
    q:add("pcall-repeat")
    t.ok(t.wait_until(idle(q), 10), "all three stopped")
    local errs = dead_errors(q)
    t.eq(errs["pcall-loop"], "timeout", "a caught loop timeout still fails the job")
    t.eq(errs["pcall-sleep"], "timeout", "a caught sleep timeout still fails the job")
    t.eq(errs["pcall-repeat"], "timeout", "pcall in a loop cannot outrun it")
    t.eq(after["pcall-loop"], nil, "no code ran after the caught timeout")
    t.eq(after["pcall-sleep"], nil)
    t.eq(q:stats().timeouts, 3, "one timeout per job")
end

-- A handler waiting on exec: the wait is cancelled and the child killed.
-- Real time only: under --virtual-time the clock stands still while a child
-- runs (SPEC 2), so a timeout on the virtual clock cannot end the wait.
if not t.virtual then
do -- a handler waiting on exec: the wait is cancelled and the child killed
    local pidfile = os.tmpname()
    local result
    local q = newq({
        timeout = 0.1,
        handler = function()
            result = wq.exec({"sh", "-c", "echo $$ > " .. pidfile .. "; exec sleep 10"})
        end,
    })
    local w0 = os.time()
    q:add("exec")
    local ok = t.wait_until(idle(q), 15)
    t.ok(ok, "the exec-waiting handler was stopped")
    t.ok(os.time() - w0 <= 3, "well before the child would exit by itself")
    t.eq(result, nil, "exec never returned to the handler")
    t.eq(dead_errors(q).exec, "timeout", "exec wait fails with 'timeout'")
    local pid = tonumber(read_file(pidfile) or "")
    t.ok(pid ~= nil, "the child wrote its pid")
    if pid then
        t.ok(t.wait_until(function()
            return process_gone(pid)
        end, 3), "the child was killed and reaped (no zombie)")
    end
    os.remove(pidfile)
    -- the queue keeps working, exec too
    local q2 = newq({
        timeout = 5,
        handler = function()
            result = wq.exec({"echo", "still works"})
        end,
    })
    q2:add("again")
    t.ok(t.wait_until(idle(q2)), "processed")
    t.eq(result and result.stdout, "still works\n", "exec works after a killed child")
end

end

do -- a handler waiting in get on another queue: the wait is withdrawn
    local other = wq.queue("to-other")
    local q = newq({
        timeout = 0.03,
        handler = function()
            other:get()
        end,
    })
    q:add("getter")
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(dead_errors(q).getter, "timeout")
    other:add("item")
    wq.sleep(0.01)
    t.eq(other:len(), 1, "the timed-out getter did not take the item")
    t.eq(other:get(), "item", "it is still there for others")
end

do -- a handler waiting in shutdown_with_drain of another queue
    local other = wq.queue("to-drain")
    other:add("held")
    other:get()
    local q = newq({
        timeout = 0.03,
        handler = function()
            other:shutdown_with_drain()
        end,
    })
    q:add("drainer")
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(dead_errors(q).drainer, "timeout", "drain wait times out")
    other:done("held")
end

do -- a timeout is a failure like any other: it retries through the limiter
    local runs = 0
    local q = newq({
        timeout = 0.02,
        max_retries = 2,
        limiter = wq.limiter.exponential(0.001, 1),
        handler = function()
            runs = runs + 1
            wq.sleep(1)
        end,
    })
    q:add("r")
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(runs, 3, "timed out 3 times: 1 run + 2 retries")
    t.eq(q:dead()[1] and q:dead()[1].attempts, 3)
end

do -- a CPU loop inside a coroutine the handler created is stopped too
    local after = {}
    local q = newq({
        timeout = 0.05,
        max_retries = 0,
        handler = function(key)
            if key == "wrap" then
                coroutine.wrap(function()
                    while true do end
                end)()
            else -- resume catches the error; the handler still cannot go on
                local co = coroutine.create(function()
                    while true do end
                end)
                coroutine.resume(co)
                after[#after + 1] = key
                while true do end
            end
        end,
    })
    q:add("wrap")
    q:add("resume")
    t.ok(t.wait_until(idle(q)), "processed")
    local errs = dead_errors(q)
    t.ok(errs.wrap and errs.wrap:find("timeout", 1, true), "wrap: dead with a timeout (" .. tostring(errs.wrap) .. ")")
    t.eq(errs.resume, "timeout", "resume: dead with a timeout")
    t.eq(after, {}, "the handler did not go on after the timeout")
    t.eq(q:stats().timeouts, 2)
end

-- A deadline already past when the handler first waits (a timeout far
-- shorter than a loop turn): the wait ends with "timeout", counted once.
do
    local q = newq({
        timeout = 1e-9,
        handler = function()
            wq.sleep(0.01)
        end,
    })
    q:add("short")
    t.ok(t.wait_until(idle(q)), "processed")
    t.eq(dead_errors(q).short, "timeout", "short: dead with a timeout")
    t.eq(q:stats().timeouts, 1, "the timeout is counted")
end

t.done()
