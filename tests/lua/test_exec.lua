-- wq.exec: runs a program without a shell, concurrently with everything
-- else; stdin/cwd/env/timeout; status/signal/stdout/stderr; large outputs;
-- missing programs; many at once; no zombies left behind.
local t = require "wqtest"

local function sh(script, opts, ...)
    return wq.exec({"sh", "-c", script, "sh", ...}, opts)
end

do -- status, stdout, stderr
    local r = sh("echo out; echo err >&2; exit 3")
    t.eq(type(r), "table", "exec returns a table")
    t.eq(r.status, 3, "status")
    t.eq(math.type(r.status), "integer")
    t.eq(r.signal, nil, "no signal")
    t.eq(r.stdout, "out\n", "stdout")
    t.eq(r.stderr, "err\n", "stderr")
    t.eq(r.timeout, false, "not timed out (extra field)")
    r = wq.exec({"true"})
    t.eq(r.status, 0)
    t.eq(r.stdout, "")
    t.eq(r.stderr, "")
end

do -- killed by a signal: signal set, no status
    local r = sh("kill -TERM $$; sleep 5")
    t.eq(r.signal, 15, "signal number")
    t.eq(r.status, nil, "no exit status when killed")
    r = sh("kill -KILL $$")
    t.eq(r.signal, 9)
end

do -- argv is passed as is, without a shell
    local r = wq.exec({"echo", "a b", "$HOME", "*", "'q'", 1, 2.5})
    t.eq(r.stdout, "a b $HOME * 'q' 1 2.5\n", "arguments are not interpreted; numbers converted")
    r = sh('printf "%s|" "$@"', nil, "x y", "", "z")
    t.eq(r.stdout, "x y||z|", "empty and spaced arguments survive")
    r = wq.exec({"printf", "a\\0b"})
    t.eq(r.stdout, "a\0b", "binary output (NUL byte)")
end

do -- stdin
    local r = wq.exec({"cat"}, {stdin = "hello\nworld"})
    t.eq(r.stdout, "hello\nworld", "stdin is fed")
    r = wq.exec({"cat"}, {stdin = ""})
    t.eq(r.stdout, "", "empty stdin")
    r = wq.exec({"cat"})
    t.eq(r.stdout, "", "no stdin: EOF at once (does not hang)")
    local big = string.rep("0123456789abcdef", 4 * 65536) -- 4 MiB
    r = wq.exec({"wc", "-c"}, {stdin = big})
    t.eq(tonumber(r.stdout), #big, "4 MiB of stdin arrive completely")
    r = wq.exec({"cat"}, {stdin = big})
    t.eq(#r.stdout, #big, "4 MiB through cat: nothing lost")
    t.ok(r.stdout == big, "and unchanged")
    r = wq.exec({"true"}, {stdin = big})
    t.eq(r.status, 0, "a child that does not read its stdin: no hang, no SIGPIPE for us")
    r = sh("head -c 10 >/dev/null; echo read10", {stdin = big})
    t.eq(r.stdout, "read10\n", "a child that reads part of its stdin")
end

do -- large outputs are neither truncated nor deadlocked
    local r = sh("head -c 5000000 /dev/zero | tr '\\0' x")
    t.eq(#r.stdout, 5000000, "5 MB on stdout")
    t.ok(r.stdout == string.rep("x", 5000000), "all of it")
    r = wq.exec({"seq", "1", "300000"})
    t.eq(select(2, r.stdout:gsub("\n", "")), 300000, "300000 lines from seq")
    t.eq(r.stdout:sub(-7), "300000\n", "the last line is there")
    -- both pipes full at once: the child blocks on whichever we do not read
    r = sh("i=0; while [ $i -lt 4 ]; do head -c 1000000 /dev/zero | tr '\\0' o; "
        .. "head -c 1000000 /dev/zero | tr '\\0' e >&2; i=$((i+1)); done")
    t.eq(#r.stdout, 4000000, "4 MB on stdout interleaved with stderr")
    t.eq(#r.stderr, 4000000, "4 MB on stderr")
    -- large stdin and large stdout at the same time
    local big = string.rep("z", 3000000)
    r = wq.exec({"cat"}, {stdin = big})
    t.eq(#r.stdout, 3000000, "3 MB in, 3 MB out, no deadlock")
end

do -- cwd
    local r = wq.exec({"pwd"}, {cwd = "/"})
    t.eq(r.stdout, "/\n", "cwd")
    r = wq.exec({"pwd"})
    t.ok(r.stdout ~= "" and r.stdout:sub(1, 1) == "/", "without cwd: ours")
    local res, err = wq.exec({"pwd"}, {cwd = "/nonexistent/dir/xyz"})
    t.eq(res, nil, "a missing cwd fails")
    t.matches(err, "exec", "with a message")
end

do -- env: added to ours; false removes a name
    local r = sh('echo "$WQ_A|$WQ_B|${HOME-unset}|${PATH:+path}"',
        {env = {WQ_A = "alpha", WQ_B = 42, HOME = false}})
    t.eq(r.stdout, "alpha|42|unset|path\n", "env added, number converted, HOME removed, PATH kept")
    r = sh('echo "${WQ_A-none}"')
    t.eq(r.stdout, "none\n", "env does not leak into later execs")
end

do -- a missing program is a failed result, not a crash
    local r, err = wq.exec({"wq-no-such-program-xyz", "arg"})
    t.eq(r, nil, "nil result")
    t.matches(err, "wq-no-such-program-xyz", "message names the program")
    t.matches(err, "No such file", "and the reason")
    r, err = wq.exec({"/etc/hostname"})
    t.eq(r, nil, "a file that is not executable")
    t.eq(type(err), "string")
    r, err = wq.exec({"/"})
    t.eq(r, nil, "a directory")
    -- and exec keeps working
    t.eq(wq.exec({"echo", "ok"}).stdout, "ok\n", "exec still works")
end

do -- timeout: the child is killed, the result says so
    if not t.virtual then -- the virtual clock stands still while a child runs
        local t0 = wq.now()
        local r = wq.exec({"sleep", "10"}, {timeout = 0.1})
        local took = wq.now() - t0
        t.eq(r.timeout, true, "timeout = true")
        t.eq(r.signal, 9, "killed with SIGKILL")
        t.at(took, 0.1, "returned at the timeout", 0.5)
        -- the whole process group is killed (a shell and its child)
        local pidfile = os.tmpname()
        r = sh("sleep 10 & echo $! > " .. pidfile .. "; wait", {timeout = 0.1})
        t.eq(r.timeout, true)
        local f = io.open(pidfile)
        local pid = f and tonumber(f:read("a"))
        if f then
            f:close()
        end
        os.remove(pidfile)
        t.ok(pid ~= nil, "grandchild pid recorded")
        if pid then
            t.ok(t.wait_until(function()
                local st = io.open("/proc/" .. pid .. "/stat")
                if st then
                    local s = st:read("a")
                    st:close()
                    return s:match("^%d+ %b() Z") ~= nil -- zombie of init: killed
                end
                return true
            end, 3), "the grandchild was killed too")
        end
    end
    local r = wq.exec({"echo", "fast"}, {timeout = 5})
    t.eq(r.timeout, false, "a quick child under a timeout")
    t.eq(r.stdout, "fast\n")
end

do -- a child leaving a grandchild holding stdout: exec waits for the pipe to close
    local r = sh("(sleep 0.2; echo late) & echo early")
    t.eq(r.stdout, "early\nlate\n", "output of the grandchild is collected")
    t.eq(r.status, 0)
end

do -- exec runs concurrently with other tasks
    local ticks = 0
    local stop = false
    wq.spawn(function()
        while not stop do
            ticks = ticks + 1
            wq.sleep(0.01)
        end
    end)
    local r = wq.exec({"sleep", "0.2"})
    stop = true
    t.eq(r.status, 0)
    if not t.virtual then
        t.ok(ticks >= 5, "other tasks ran while exec waited (" .. ticks .. " ticks)")
    else
        t.ok(ticks >= 1, "other tasks ran while exec waited")
    end
end

do -- many concurrent execs, from tasks, timer callbacks and handlers
    local results = {}
    local pending = 0
    for i = 1, 40 do
        pending = pending + 1
        wq.spawn(function(x)
            local r = sh('sleep 0.05; echo "$1"', nil, x)
            results[x] = r and r.stdout
            pending = pending - 1
        end, i)
    end
    pending = pending + 1
    wq.after(0, function()
        results.timer = wq.exec({"echo", "timer"}).stdout
        pending = pending - 1
    end)
    local q = wq.queue("exec-handler", {
        workers = 5,
        handler = function(key)
            results["h" .. key] = wq.exec({"echo", "h" .. key}).stdout
        end,
    })
    for i = 1, 10 do
        q:add(i)
    end
    local t0 = os.time()
    t.ok(t.wait_until(function()
        local s = q:stats()
        return pending == 0 and s.depth == 0 and s.processing == 0
    end, 20), "all finished")
    t.ok(os.time() - t0 <= 5, "in parallel, not one after the other")
    local okcount = 0
    for i = 1, 40 do
        if results[i] == i .. "\n" then
            okcount = okcount + 1
        end
    end
    t.eq(okcount, 40, "40 concurrent execs each got their own output")
    t.eq(results.timer, "timer\n", "exec in a timer callback")
    local hcount = 0
    for i = 1, 10 do
        if results["h" .. i] == "h" .. i .. "\n" then
            hcount = hcount + 1
        end
    end
    t.eq(hcount, 10, "exec in handlers")
end

do -- no zombies: no process has us as parent any more, but the keeper
    local mypid = io.open("/proc/self/stat"):read("a"):match("^(%d+)")
    local ls = wq.exec({"ls", "/proc"})
    local children, keepers = {}, 0
    for pid in ls.stdout:gmatch("(%d+)\n") do
        local f = io.open("/proc/" .. pid .. "/stat")
        if f then
            local s = f:read("a") or ""
            f:close()
            local name, state, ppid = s:match("^%d+ (%b()) (%S) (%d+)")
            if ppid == mypid and name == "(wqrun-keeper)" and state ~= "Z" then
                keepers = keepers + 1
            elseif ppid == mypid then
                children[#children + 1] = pid .. ":" .. state
            end
        end
    end
    t.eq(children, {}, "no child process left (zombie or running)")
    t.eq(keepers, 1, "one process keeper runs beside the children")
end

do -- wq.exec reaps only its own children: io.popen keeps its exit status
    local f = io.popen("sleep 0.05; exit 3")
    local r = wq.exec({"sleep", "0.2"})
    t.eq(r.status, 0, "the exec ran")
    local ok, how, code = f:close()
    t.eq({ok, how, code}, {nil, "exit", 3}, "io.popen's close still sees its status")
end

do -- argv's length is its raw length: a __len metamethod cannot size the copy
    local argv = setmetatable({"echo", "raw"}, {__len = function() return 1 << 40 end})
    local r = wq.exec(argv)
    t.eq(r.status, 0)
    t.eq(r.stdout, "raw\n", "only the two real elements are passed")
    local empty = setmetatable({}, {__len = function() return 3 end})
    t.raises(function() wq.exec(empty) end, "exec: bad argument 'argv' (must name a program)")
end

do -- numbers in argv are converted into strings that live until the spawn
    -- The collector runs all the time here: a converted number that nothing
    -- anchors would be freed before posix_spawn reads it (ASan reports it).
    collectgarbage("incremental", 1, 1000, 0)
    for i = 1, 20 do
        local r = wq.exec({"echo", 1.5 + i, 2.5, 3.25 * i, i}, {env = {WQ_N = i, WQ_F = 0.5}})
        t.eq(r.stdout, string.format("%s 2.5 %s %d\n", tostring(1.5 + i), tostring(3.25 * i), i),
            "numbers converted, with opts.env built between the check and the spawn")
    end
    collectgarbage("incremental", 200, 100, 13)
    collectgarbage()
    local argv = {"echo", 1, 2.5}
    wq.exec(argv)
    t.eq({math.type(argv[2]), math.type(argv[3])}, {"integer", "float"}, "the caller's argv is unchanged")
end

do -- NUL bytes and '=' are refused, not cut: nothing runs
    local marker = os.tmpname()
    os.remove(marker)
    local touch = {"sh", "-c", "touch " .. marker}
    t.raises(function() wq.exec({"echo", "a\0b"}) end, "exec: bad argument 'argv' (element 2 contains a NUL byte)")
    t.raises(function() wq.exec({"sh\0", "-c", "touch " .. marker}) end, "exec: bad argument 'argv' (element 1")
    t.raises(function() wq.exec(touch, {cwd = "/tmp\0/x"}) end, "exec: bad argument 'cwd' (contains a NUL byte)")
    t.raises(function() wq.exec(touch, {env = {["A\0B"] = "1"}}) end, "exec: bad argument 'env' (a name contains a NUL byte)")
    t.raises(function() wq.exec(touch, {env = {A = "1\0 2"}}) end,
        "exec: bad argument 'env' (the value of 'A' contains a NUL byte)")
    t.raises(function() wq.exec(touch, {env = {["PATH=/evil:x"] = "1"}}) end,
        "exec: bad argument 'env' (the name 'PATH=/evil:x' contains '=')")
    t.raises(function() wq.exec(touch, {env = {["="] = "1"}}) end, "exec: bad argument 'env' (the name '=' contains '=')")
    t.raises(function() wq.exec(touch, {env = {[""] = "1"}}) end, "exec: bad argument 'env' (a name is empty)")
    t.raises(function() wq.exec(touch, {env = {[""] = false}}) end, "exec: bad argument 'env' (a name is empty)",
        "also when removing")
    t.eq(io.open(marker), nil, "none of them ran the program")
    -- NUL bytes in stdin are data and pass through
    t.eq(wq.exec({"cat"}, {stdin = "a\0b"}).stdout, "a\0b", "stdin keeps its NUL bytes")
    local r = sh('echo "$WQ_X|$PATH"', {env = {WQ_X = "x=y"}})
    t.ok(r.stdout:match("^x=y|") and not r.stdout:find("evil"), "'=' in a value is fine; PATH untouched")
end

t.done()
