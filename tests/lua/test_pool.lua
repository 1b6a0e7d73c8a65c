-- Process pools (SPEC 10.1), pool:call: a round trip; FIFO waiting with at
-- most size processes busy; a process that exits, answers with a bad line,
-- a line over 1 MiB, more than one line, or overruns its timeout is killed
-- (with its process group) and replaced, and the call says which; a process
-- that keeps dying at start backs off; stderr lines reach the log with the
-- queue and key; close; bad arguments raise naming the function.
local t = require "wqtest"
t.watchdog(90)

local worker = {"python3", "pool_worker.py"}

local function alive(pid)
    local f = io.open("/proc/" .. pid .. "/stat")
    if not f then
        return false
    end
    local stat = f:read("a")
    f:close()
    return not stat:match("^%d+ %b() Z") -- a zombie is dead
end

local function tmpname()
    local name = os.tmpname()
    os.remove(name)
    return name
end

do -- bad arguments raise, naming the function and the argument
    t.raises(function() wq.pool() end, "pool: bad argument 'argv' (table expected, got nil)")
    t.raises(function() wq.pool({}) end, "pool: bad argument 'argv' (must name a program)")
    t.raises(function() wq.pool({"x", {}}) end, "pool: bad argument 'argv' (element 2: string expected")
    t.raises(function() wq.pool({"true"}, {size = 0}) end, "pool: bad argument 'size' (integer 1-1024 expected, got 0)")
    t.raises(function() wq.pool({"true"}, {sizes = 2}) end, "pool: bad argument 'opts' (unknown option 'sizes')")
    t.raises(function() wq.pool({"true"}, {timeout = -1}) end, "pool: bad argument 'timeout' (must be >= 0)")
    t.raises(function() wq.pool({"true"}, {env = {["A=B"] = "x"}}) end, "pool: bad argument 'env'")
    t.raises(function() wq.pool({"true"}, 5) end, "pool: bad argument 'opts' (table expected, got number)")
    local r, err = wq.pool({"/nonexistent/program"})
    t.eq(r, nil, "a program that cannot start: nil")
    t.matches(err, "pool: cannot run '/nonexistent/program': No such file or directory")
end

local p = assert(wq.pool(worker, {size = 2, timeout = 5}))
t.eq(p:size(), 2, "size")
t.matches(tostring(p), "pool (python3, 2 processes)")

do -- pool:call's own argument checks, and it must run in a task
    t.raises(function() p:call() end, "pool:call: bad argument 'request' (table expected, got nil)")
    t.raises(function() p:call("x") end, "pool:call: bad argument 'request' (table expected, got string)")
    t.raises(function() p:call({f = print}) end, "pool:call: bad argument 'request'")
    t.raises(function() p.call({}) end, "pool:call: bad argument 'self'")
    t.raises(coroutine.wrap(function() p:call({op = "echo"}) end), "pool:call: cannot wait here")
end

local done = false
wq.spawn(function()
    do -- a round trip: the table as one JSON line, the reply decoded
        local r = p:call({op = "echo", v = {1, "two", {three = 3.5}, "\n\"\0"}})
        t.eq(r and r.echo, {1, "two", {three = 3.5}, "\n\"\0"}, "the request and reply round trip exactly")
        t.eq(math.type(r.pid), "integer")
    end

    do -- FIFO: 5 calls on 2 processes, at most 2 busy, the waiting ones served in order of arrival
        local busy, most, order, left = 0, 0, {}, 5
        local st = p:stats()
        t.eq(st.busy, 0)
        t.eq(st.running, 2)
        for i = 1, 5 do
            wq.spawn(function()
                busy = busy + 1
                -- call 1 holds one process while 2, 3, 4, 5 take turns on the other
                local r = p:call({op = "slow", s = i == 1 and 0.8 or 0.15})
                order[#order + 1] = i
                t.ok(r and r.pid, "slow call " .. i .. " answered")
                left = left - 1
            end)
        end
        t.ok(t.wait_until(function()
            local s = p:stats()
            most = math.max(most, s.busy)
            if s.busy > 0 then
                t.ok(s.busy <= 2, "never more than 2 processes busy")
                t.eq(s.busy + s.waiting, left, "each call busy or waiting")
            end
            return left == 0
        end, 10, 0.01), "all 5 calls answered")
        t.eq(most, 2, "2 processes were busy at once")
        t.eq(order, {2, 3, 4, 5, 1}, "waiting calls served in FIFO order (2, 3, 4, 5 each after the one before)")
    end

    do -- a process that exits mid-call: the call fails saying so, a new process serves the next
        local r, err = p:call({op = "exit", status = 3})
        t.eq(r, nil)
        t.matches(err, "pool python3: process ")
        t.matches(err, "exited with status 3")
        r = p:call({op = "echo", v = 1})
        t.eq(r and r.echo, 1, "the next call is served")
    end

    do -- kill -9 of the process from outside, mid-call
        local pidfile = tmpname()
        local r, err
        local waiting = true
        wq.spawn(function()
            r, err = p:call({op = "slow", s = 30, pidfile = pidfile})
            waiting = false
        end)
        local victim = t.wait_pid(pidfile, 5)
        t.ok(victim, "the busy process wrote its pid")
        os.execute("kill -9 " .. victim)
        t.ok(t.wait_until(function() return not waiting end, 5), "the call ended")
        t.eq(r, nil)
        t.matches(err, "process " .. victim .. " was killed by signal 9")
        r = p:call({op = "echo", v = 2})
        t.eq(r and r.echo, 2, "a new process serves the next call")
        os.remove(pidfile)
    end

    do -- a line that is not JSON; more than one line; a line over 1 MiB
        local r, err = p:call({op = "bad"})
        t.eq(r, nil)
        t.matches(err, 'bad reply line from process')
        t.matches(err, '"this is not json"')
        r, err = p:call({op = "two"})
        t.eq(r, nil)
        t.matches(err, "more than one line for one request")
        r, err = p:call({op = "long", n = 1024 * 1024 + 10})
        t.eq(r, nil)
        t.matches(err, "over 1048576 bytes")
        r, err = p:call({op = "long", n = 1024 * 1024 - 2}) -- with its quotes: exactly 1 MiB
        t.eq(err, nil, "a line of exactly 1 MiB is fine")
        t.eq(r and #r, 1024 * 1024 - 2)
        t.eq(p:call({op = "echo", v = 3}).echo, 3, "replaced processes serve")
    end

    do -- timeout: the process and its process group (a grandchild) are killed
        local tp = assert(wq.pool(worker, {timeout = 1.5}))
        local pidfile = tmpname()
        -- a first call: python3 has started (a loaded machine may take a second for that)
        t.eq(tp:call({op = "echo", v = 0}).echo, 0, "the process is up")
        local t0 = wq.now()
        local r, err = tp:call({op = "hang", pidfile = pidfile})
        t.eq(r, nil)
        t.matches(err, "timed out after 1.5 s")
        t.at(wq.now() - t0, 1.5, "after the timeout", 1)
        local f = io.open(pidfile)
        local text = f and f:read("a") or ""
        if f then f:close() end
        local pid, child = text:match("(%d+) (%d+)")
        t.ok(pid and child, "the worker wrote its pids")
        t.ok(t.wait_until(function() return not alive(pid) and not alive(child) end, 5),
            "the process and its grandchild are gone")
        t.eq(tp:call({op = "echo", v = 4}).echo, 4, "a fresh process serves after a timeout")
        tp:close()
        os.remove(pidfile)
    end

    do -- a program that keeps dying at start: backoff, calls fail clearly meanwhile
        local bp = assert(wq.pool({"sh", "-c", "exit 7"}))
        local r, err = bp:call({x = 1})
        t.eq(r, nil)
        t.matches(err, "exited with status 7")
        -- (the backoff is timed by the runner's clock: a virtual one runs its 0.1 s at once,
        -- while the process's death takes real time, so "down" is not seen between)
        if not t.virtual then
            t.ok(t.wait_until(function() return bp:stats().running == 0 end, 5), "it ends up down, backing off")
            local started = bp:stats().started
            r, err = bp:call({x = 1})
            t.eq(r, nil, "a call fails at once while no process runs")
            t.matches(err, "pool sh: no process running (process ")
            t.matches(err, "exited with status 7)")
            wq.sleep(0.5)
            t.ok(bp:stats().started - started <= 4, "no spinning: a few restarts in 0.5 s, got " .. bp:stats().started - started)
        end
        bp:close()
        r, err = bp:call({x = 1})
        t.eq(err, "pool closed")
    end

    do -- close: a waiting and a running call fail; the processes are gone
        local cp = assert(wq.pool(worker))
        local pid = cp:call({op = "pid"}).pid
        local errs = {}
        for i = 1, 2 do
            wq.spawn(function()
                local r, err = cp:call({op = "slow", s = 30})
                errs[#errs + 1] = err
            end)
        end
        t.ok(t.wait_until(function() return cp:stats().waiting == 1 end, 5))
        cp:close()
        t.ok(t.wait_until(function() return #errs == 2 end, 5), "both calls ended")
        t.eq(errs, {"pool closed", "pool closed"})
        t.ok(t.wait_until(function() return not alive(pid) end, 5), "its process is gone")
        t.eq(cp:stats().closed, true)
        t.eq(cp:stats().running, 0)
    end

    do -- env and cwd
        local ep = assert(wq.pool({"sh", "-c", 'while read -r l; do printf \'{"v":"%s","d":"%s"}\\n\' "$WQ_POOL_T" "$(pwd)"; done'},
            {env = {WQ_POOL_T = "yes"}, cwd = "/tmp"}))
        local r = ep:call({})
        t.eq(r, {v = "yes", d = "/tmp"}, "opts.env and opts.cwd reach the process")
        ep:close()
    end
    done = true
end)

-- stderr lines reach the log with the queue and key of the job (or the pool when idle)
do
    local wqrun = os.getenv("WQRUN")
    if wqrun then
        local script = tmpname() .. ".lua"
        local f = assert(io.open(script, "w"))
        f:write([=[
local p = assert(wq.pool({"python3", "pool_worker.py"}))
local q = wq.queue("logq", {handler = p})
q:add("key-7", {op = "log"})
wq.spawn(function() p:call({op = "stderr", msg = "idle words"}) end)
]=])
        f:close()
        wq.spawn(function()
            local r = wq.exec({wqrun, "--log-format", "json", script})
            t.eq(r.status, 0, r.stderr)
            local seen_job, seen_call = false, false
            for line in r.stderr:gmatch("[^\n]+") do
                if line:find("hello from key-7", 1, true) then
                    seen_job = true
                    t.matches(line, '"queue":"logq"')
                    t.matches(line, '"key":"key-7"')
                    t.matches(line, '"pool":"python3"')
                    t.matches(line, '"level":"info"')
                end
                if line:find("idle words", 1, true) then
                    seen_call = true
                    t.matches(line, '"pool":"python3"')
                end
            end
            t.ok(seen_job, "the job's stderr line is in the log: " .. r.stderr)
            t.ok(seen_call, "a plain call's stderr line is in the log")
            r = wq.exec({wqrun, script})
            t.matches(r.stderr, "python3[", "text form")
            t.matches(r.stderr, "] logq 'key-7': hello from key-7", "text form names the queue and key")
            os.remove(script)
        end)
    end
end

t.ok(t.wait_until(function() return done end, 80), "the call tests finished")
p:close()
t.done()
