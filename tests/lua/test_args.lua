-- Argument checking: wrong types and invalid values raise errors naming the
-- function and the parameter ("add: bad argument 'payload' (...)"); a call
-- that raises changes nothing and the queue keeps working. Waiting
-- functions raise a clear error where they cannot yield.
local t = require "wqtest"

local function bad(fn, expect, msg)
    return t.raises(fn, expect, msg or expect)
end

local nan, inf = 0 / 0, math.huge
local lim = wq.limiter.exponential(0.001, 1)

do -- wq.queue
    bad(function() wq.queue() end, "queue: bad argument 'name'")
    bad(function() wq.queue(12) end, "queue: bad argument 'name'")
    bad(function() wq.queue("") end, "queue: bad argument 'name'")
    bad(function() wq.queue(string.rep("a", 65)) end, "queue: bad argument 'name'")
    bad(function() wq.queue("a b") end, "queue: bad argument 'name'")
    bad(function() wq.queue("a/b") end, "queue: bad argument 'name'")
    bad(function() wq.queue("ok", 5) end, "queue: bad argument 'opts'")
    bad(function() wq.queue("ok", {workres = 2}) end, "queue: bad argument 'opts'", "unknown option")
    bad(function() wq.queue("ok", {handler = "f"}) end, "queue: bad argument 'handler'")
    bad(function() wq.queue("ok", {handler = print, workers = 0}) end, "queue: bad argument 'workers'")
    bad(function() wq.queue("ok", {handler = print, workers = -1}) end, "queue: bad argument 'workers'")
    bad(function() wq.queue("ok", {handler = print, workers = 1.5}) end, "queue: bad argument 'workers'")
    bad(function() wq.queue("ok", {handler = print, workers = "2"}) end, "queue: bad argument 'workers'")
    bad(function() wq.queue("ok", {max_retries = -1}) end, "queue: bad argument 'max_retries'")
    bad(function() wq.queue("ok", {max_retries = 2.5}) end, "queue: bad argument 'max_retries'")
    bad(function() wq.queue("ok", {timeout = -1}) end, "queue: bad argument 'timeout'")
    bad(function() wq.queue("ok", {timeout = nan}) end, "queue: bad argument 'timeout'")
    bad(function() wq.queue("ok", {timeout = inf}) end, "queue: bad argument 'timeout'")
    bad(function() wq.queue("ok", {timeout = "1"}) end, "queue: bad argument 'timeout'")
    bad(function() wq.queue("ok", {persist = "yes"}) end, "queue: bad argument 'persist'")
    bad(function() wq.queue("ok", {limiter = {}}) end, "queue: bad argument 'limiter'")
    bad(function() wq.queue("ok", {limiter = 5}) end, "queue: bad argument 'limiter'")
    -- none of these created the queue
    local q = t.no_error(function() return wq.queue("ok", {max_retries = 0}) end, "the name is still free")
    t.eq(tostring(q), "wq.Queue(ok)")
    bad(function() wq.queue("ok") end, "queue: bad argument 'name'", "a duplicate queue name raises")
    -- q.add(...) instead of q:add(...): the method and 'self' are named, also through pcall
    bad(function() q.add("k") end, "q:add: bad argument 'self'")
    bad(function() q.len() end, "q:len: bad argument 'self'")
    local ok, err = pcall(q.get, "k")
    t.eq(ok, false)
    t.matches(err, "q:get: bad argument 'self'", "named when called through pcall too")
    t.matches(t.raises(function() wq.queue("ok") end), "already exists", "and says why")
    t.no_error(function() wq.queue(string.rep("z", 64)) end, "64 characters are fine")
    t.no_error(function() wq.queue("A-z_0.9") end, "all the allowed characters")
    t.no_error(function() wq.queue("w", {workers = 1, max_retries = 0, timeout = 0, persist = false}) end,
        "boundary values accepted")
end

local q = wq.queue("args")

do -- add / add_after / add_rate_limited
    bad(function() q:add() end, "add: bad argument 'key'")
    bad(function() q:add(nil, "p") end, "add: bad argument 'key'")
    bad(function() q:add({}) end, "add: bad argument 'key'")
    bad(function() q:add(true) end, "add: bad argument 'key'")
    bad(function() q:add("k", print) end, "add: bad argument 'payload' (function not allowed)")
    bad(function() q:add("k", 5) end, "add: bad argument 'payload'")
    bad(function() q:add("k", true) end, "add: bad argument 'payload'")
    bad(function() q:add("k", {f = print}) end, "add: bad argument 'payload'")
    bad(function() q:add("k", {1 / 0}) end, "add: bad argument 'payload'")
    bad(function() q:add("k", "p", 5) end, "add: bad argument 'opts'")
    bad(function() q:add("k", "p", {priority = 1.5}) end, "add: bad argument 'priority'")
    bad(function() q:add("k", "p", {priority = "1"}) end, "add: bad argument 'priority'")
    bad(function() q:add("k", "p", {priority = 2 ^ 40}) end, "add: bad argument 'priority'")
    bad(function() q:add("k", "p", {priority = math.maxinteger}) end, "add: bad argument 'priority'")

    bad(function() q:add_after(nil, 1) end, "add_after: bad argument 'key'")
    bad(function() q:add_after("k") end, "add_after: bad argument 'seconds'")
    bad(function() q:add_after("k", "1") end, "add_after: bad argument 'seconds'")
    bad(function() q:add_after("k", nan) end, "add_after: bad argument 'seconds'")
    bad(function() q:add_after("k", inf) end, "add_after: bad argument 'seconds'")
    bad(function() q:add_after("k", 1, print) end, "add_after: bad argument 'payload'")
    bad(function() q:add_after("k", 1, nil, {priority = 0.5}) end, "add_after: bad argument 'priority'")

    bad(function() q:add_rate_limited() end, "add_rate_limited: bad argument 'key'")
    bad(function() q:add_rate_limited("k", print) end, "add_rate_limited: bad argument 'payload'")

    bad(function() q:done() end, "done: bad argument 'key'")
    bad(function() q:forget({}) end, "forget: bad argument 'key'")
    bad(function() q:num_requeues(nil) end, "num_requeues: bad argument 'key'")
    bad(function() q:retry_dead(false) end, "retry_dead: bad argument 'key'")

    -- methods on something that is not a queue
    t.raises(function() q.add("k") end, "add", "a method called with a dot names the function")
    t.raises(function() q.len({}) end, "len")

    -- nothing changed, and the queue works
    local s = q:stats()
    t.eq({s.adds, s.retries, s.depth, s.waiting, q:len()}, {0, 0, 0, 0, 0}, "the raising calls changed nothing")
    t.eq(q:num_requeues("k"), 0, "add_rate_limited that raised did not call the limiter")
    t.eq(q:add("k", "v"), true)
    local k, p = q:get()
    t.eq({k, p}, {"k", "v"}, "the queue keeps working")
    q:done("k")
end

do -- runtime functions
    bad(function() wq.sleep() end, "sleep: bad argument 'seconds'")
    bad(function() wq.sleep("1") end, "sleep: bad argument 'seconds'")
    bad(function() wq.sleep(nan) end, "sleep: bad argument 'seconds'")
    bad(function() wq.sleep(inf) end, "sleep: bad argument 'seconds'")
    bad(function() wq.spawn() end, "spawn: bad argument 'fn'")
    bad(function() wq.spawn("f") end, "spawn: bad argument 'fn'")
    bad(function() wq.after() end, "after: bad argument 'seconds'")
    bad(function() wq.after(nan, print) end, "after: bad argument 'seconds'")
    bad(function() wq.after(1) end, "after: bad argument 'fn'")
    bad(function() wq.after(1, "f") end, "after: bad argument 'fn'")
    bad(function() wq.every(0, print) end, "every: bad argument 'interval'")
    bad(function() wq.every(-1, print) end, "every: bad argument 'interval'")
    bad(function() wq.every(inf, print) end, "every: bad argument 'interval'")
    bad(function() wq.every(1) end, "every: bad argument 'fn'")
    bad(function() wq.requeue() end, "requeue: bad argument 'seconds'")
    bad(function() wq.requeue(nan) end, "requeue: bad argument 'seconds'")
    bad(function() wq.exit("x") end, "exit: bad argument 'code'")
    bad(function() wq.exit(256) end, "exit: bad argument 'code'")
    bad(function() wq.exit(-1) end, "exit: bad argument 'code'")
    bad(function() wq.exit(1.5) end, "exit: bad argument 'code'")
    bad(function() wq.log() end, "log: bad argument")
end

do -- exec
    bad(function() wq.exec() end, "exec: bad argument 'argv'")
    bad(function() wq.exec("ls") end, "exec: bad argument 'argv'")
    bad(function() wq.exec({}) end, "exec: bad argument 'argv'")
    bad(function() wq.exec({"echo", {}}) end, "exec: bad argument 'argv'")
    bad(function() wq.exec({"echo"}, 5) end, "exec: bad argument 'opts'")
    bad(function() wq.exec({"cat"}, {stdin = 5}) end, "exec: bad argument 'stdin'")
    bad(function() wq.exec({"pwd"}, {cwd = true}) end, "exec: bad argument 'cwd'")
    bad(function() wq.exec({"env"}, {env = "A=1"}) end, "exec: bad argument 'env'")
    bad(function() wq.exec({"env"}, {env = {A = {}}}) end, "exec: bad argument 'env'")
    bad(function() wq.exec({"env"}, {env = {"A=1"}}) end, "exec: bad argument 'env'")
    bad(function() wq.exec({"sleep", "1"}, {timeout = -1}) end, "exec: bad argument 'timeout'")
    bad(function() wq.exec({"sleep", "1"}, {timeout = nan}) end, "exec: bad argument 'timeout'")
    t.eq(wq.exec({"echo", "fine"}).stdout, "fine\n", "exec works after the bad calls")
end

do -- limiters and backoff
    bad(function() wq.limiter.exponential(-1, 1) end, "exponential: bad argument 'base'")
    bad(function() wq.limiter.exponential(nan, 1) end, "exponential: bad argument 'base'")
    bad(function() wq.limiter.exponential("1", 1) end, "exponential: bad argument 'base'")
    bad(function() wq.limiter.exponential(1, inf) end, "exponential: bad argument 'max'")
    bad(function() wq.limiter.exponential(1) end, "exponential: bad argument 'max'")
    bad(function() wq.limiter.fast_slow(-1, 1, 1) end, "fast_slow: bad argument 'fast'")
    bad(function() wq.limiter.fast_slow(1, nan, 1) end, "fast_slow: bad argument 'slow'")
    bad(function() wq.limiter.fast_slow(1, 1, 1.5) end, "fast_slow: bad argument 'max_fast'")
    bad(function() wq.limiter.fast_slow(1, 1, -1) end, "fast_slow: bad argument 'max_fast'")
    bad(function() wq.limiter.bucket(-1, 1) end, "bucket: bad argument 'qps'")
    bad(function() wq.limiter.bucket(inf, 1) end, "bucket: bad argument 'qps'")
    bad(function() wq.limiter.bucket(1, 1.5) end, "bucket: bad argument 'burst'")
    bad(function() wq.limiter.bucket(1, -1) end, "bucket: bad argument 'burst'")
    bad(function() wq.limiter.max_of(lim, "x") end, "max_of: bad argument 'limiter #2'")
    bad(function() wq.limiter.with_max_wait(nil, 1) end, "with_max_wait: bad argument 'limiter'")
    bad(function() wq.limiter.with_max_wait(lim, -1) end, "with_max_wait: bad argument 'max'")
    bad(function() lim:when() end, "when: bad argument 'key'")
    bad(function() lim:forget({}) end, "forget: bad argument 'key'")
    bad(function() lim:num_requeues(nil) end, "num_requeues: bad argument 'key'")
    bad(function() lim.when({}, "k") end, "when: bad argument 'self'")
    bad(function() wq.backoff() end, "backoff: bad argument 'opts'")
    bad(function() wq.backoff({duration = -1}) end, "backoff: bad argument 'duration'")
    bad(function() wq.backoff({duration = nan}) end, "backoff: bad argument 'duration'")
    bad(function() wq.backoff({factor = "2"}) end, "backoff: bad argument 'factor'")
    bad(function() wq.backoff({factor = -2}) end, "backoff: bad argument 'factor'")
    bad(function() wq.backoff({jitter = -1}) end, "backoff: bad argument 'jitter'")
    bad(function() wq.backoff({cap = inf}) end, "backoff: bad argument 'cap'")
    bad(function() wq.backoff({steps = 1.5}) end, "backoff: bad argument 'steps'")
    -- every negative parameter raises, naming it (SPEC: backoff parameters are >= 0)
    for _, name in ipairs({"duration", "factor", "jitter", "steps", "cap"}) do
        bad(function() wq.backoff({[name] = -1}) end, "backoff: bad argument '" .. name .. "' (must be >= 0)")
    end
    bad(function() wq.backoff({steps = math.mininteger}) end, "backoff: bad argument 'steps' (must be >= 0)")
    t.eq(wq.backoff({steps = 0}).steps, 0, "steps = 0 is accepted")
    t.eq(lim:when("ok"), 0.001, "the limiter works after the bad calls")
end

do -- durations and timeouts at their edges (docs/lua-api.md, Conventions)
    -- a timeout below a nanosecond is 1 ns: it times out, it does not mean "none"
    local r = wq.exec({"sleep", "5"}, {timeout = 1e-12})
    t.eq({r.timeout, r.signal}, {true, 9}, "exec timeout 1e-12 kills the child")
    r = wq.exec({"true"}, {timeout = 0})
    t.eq({r.status, r.timeout}, {0, false}, "exec timeout 0: no timeout")
    local tq = wq.queue("args-tiny-timeout", {timeout = 1e-12, max_retries = 0,
        handler = function() wq.sleep(0.05) end})
    tq:add("k")
    t.ok(t.wait_until(function() return tq:stats().failures == 1 end), "the handler ran")
    t.matches(tq:dead()[1] and tq:dead()[1].error, "timeout", "queue timeout 1e-12 times the handler out")
    -- longer than 2^63 ns (292 years) raises: no silent wait forever
    for _, s in ipairs({9.3e9, 2 ^ 63, 1e308, math.maxinteger}) do
        bad(function() wq.sleep(s) end, "sleep: bad argument 'seconds' (must be at most 9.2e9 seconds)")
        bad(function() wq.after(s, print) end, "after: bad argument 'seconds' (must be at most")
        bad(function() wq.every(s, print) end, "every: bad argument 'interval' (must be at most")
        bad(function() q:add_after("k", s) end, "add_after: bad argument 'seconds' (must be at most")
        bad(function() wq.requeue(s) end, "requeue: bad argument 'seconds' (must be at most")
        bad(function() wq.exec({"true"}, {timeout = s}) end, "exec: bad argument 'timeout' (must be at most")
        bad(function() wq.queue("never", {timeout = s}) end, "queue: bad argument 'timeout' (must be at most")
        bad(function() wq.limiter.exponential(1, s) end, "exponential: bad argument 'max' (must be at most")
    end
    for _, s in ipairs({-1, -math.huge, 0 / 0}) do
        bad(function() wq.exec({"true"}, {timeout = s}) end, "exec: bad argument 'timeout'")
        bad(function() wq.queue("never", {timeout = s}) end, "queue: bad argument 'timeout'")
    end
    local t0 = wq.now()
    wq.sleep(1e-12)
    wq.sleep(-1)
    wq.sleep(0)
    t.ok(wq.now() - t0 < 1, "sleeps of 1e-12, -1 and 0 return at once")
    -- number keys must be finite; unknown options are typos
    bad(function() q:add(0 / 0) end, "add: bad argument 'key' (a number key must be finite)")
    bad(function() q:add(math.huge) end, "add: bad argument 'key' (a number key must be finite)")
    bad(function() q:add("k", nil, {priorty = 1}) end, "add: bad argument 'opts' (unknown option 'priorty')")
    bad(function() wq.exec({"true"}, {timout = 1}) end, "exec: bad argument 'opts' (unknown option 'timout')")
    bad(function() wq.backoff({duraton = 1}) end, "backoff: bad argument 'opts' (unknown option 'duraton')")
    bad(function() q:schedule("s", "@daily", {catchup = "skip"}) end,
        "schedule: bad argument 'opts' (unknown option 'catchup')")
end

do -- wrong self, named like the queue's methods; wq.log's format errors
    local tm = wq.after(3600, print)
    bad(function() tm.cancel() end, "timer:cancel: bad argument 'self' (timer expected, got no value")
    bad(function() tm.pending({}) end, "timer:pending: bad argument 'self' (timer expected, got table")
    tm:cancel()
    bad(function() wq.backoff({}).step(1) end, "b:step: bad argument 'self' (backoff expected, got number")
    bad(function() lim.when(tm, "k") end, "l:when: bad argument 'self' (limiter expected")
    bad(function() wq.log({}, 1) end, "log: bad argument 'fmt' (string expected, got table)")
    bad(function() wq.log("%d", "x") end, "log: bad argument '#2' (number expected, got string)")
    bad(function() wq.log("%q", {}) end, "log: bad argument '#2'")
    bad(function() wq.log("%y", 1) end, "log: bad argument 'fmt' (invalid conversion")
end

do -- waiting functions where they cannot yield: inside a coroutine of one's own
    local function in_wrap(f)
        return function()
            coroutine.wrap(f)()
        end
    end
    local e = wq.queue("args-empty")
    t.raises(in_wrap(function() wq.sleep(0.01) end), "sleep: cannot wait here")
    t.raises(in_wrap(function() e:get() end), "get: cannot wait here")
    t.raises(in_wrap(function() wq.exec({"true"}) end), "exec: cannot wait here")
    e:add("x")
    t.eq(select(2, pcall(in_wrap(function() return e:get() end))), nil, "get without waiting works anywhere")
    t.eq(e:stats().processing, 1)
    t.raises(in_wrap(function() e:shutdown_with_drain() end), "shutdown_with_drain: cannot wait here")
    t.eq(e:shutting_down(), false, "the failed shutdown_with_drain changed nothing")
    e:done("x")
    -- inside a plain coroutine.resume: the error comes back from resume
    local co = coroutine.create(function() wq.sleep(1) end)
    local ok, err = coroutine.resume(co)
    t.eq(ok, false)
    t.matches(err, "sleep: cannot wait here", "coroutine.resume reports it")
    -- from a metamethod / sort comparator (not yieldable across a C call)
    t.raises(function()
        table.sort({3, 2, 1}, function(a, b)
            wq.sleep(0)
            return a < b
        end)
    end, "sleep: cannot wait here", "inside table.sort's comparator")
    -- and the host keeps working: sleeping here is fine
    local t0 = wq.now()
    wq.sleep(0.01)
    t.ok(wq.now() - t0 >= 0.01 - 1e-6, "sleep still works in the main chunk")
end

do -- argument errors inside a handler are job failures, not crashes
    local h = wq.queue("args-handler", {
        max_retries = 0,
        handler = function(key)
            if key == "bad" then
                q:add(nil)
            end
        end,
    })
    h:add("bad")
    h:add("good")
    t.ok(t.wait_until(function()
        local s = h:stats()
        return s.depth == 0 and s.processing == 0
    end), "processed")
    local d = h:dead()
    t.eq(#d, 1)
    t.matches(d[1] and d[1].error, "add: bad argument 'key'", "the argument error is the job's error")
    t.eq(h:stats().succeeded, 1, "the next job ran")
end

t.done()
