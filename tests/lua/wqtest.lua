-- wqtest: a tiny assertion helper for wqrun test scripts.
--
--   local t = require "wqtest"
--   t.eq(q:len(), 2, "len after two adds")
--   t.near(wq.now() - t0, 0.1, 0.05)
--   t.raises(function() q:add(print) end, "add: bad argument 'payload'")
--   t.done()            -- prints the summary; exits 1 if anything failed
--
-- Checks never raise: a failed check is recorded with its file:line and the
-- script goes on (a raise inside a handler would only be a job failure).
-- Loading the module starts a watchdog timer: a script that never reaches
-- t.done() (a hang, a task that died, a wait that never returns) fails when
-- it fires instead of exiting 0. t.watchdog(seconds) moves it (virtual-time
-- scripts that sleep long need that).
local wq = require "wq"

local M = {}
local checks, failed = 0, 0
local finished = false

local function where(level)
    -- The first frame outside this file is the test's line.
    local lv = level or 3
    while true do
        local info = debug.getinfo(lv, "Sl")
        if not info then
            return "?"
        end
        if not info.short_src:find("wqtest.lua", 1, true) then
            return info.short_src .. ":" .. tostring(info.currentline)
        end
        lv = lv + 1
    end
end

local function show(v, depth)
    depth = depth or 0
    if type(v) == "string" then
        if #v > 200 then
            return string.format("%q...(%d bytes)", v:sub(1, 200), #v)
        end
        return string.format("%q", v)
    end
    if type(v) == "number" then
        if math.type(v) == "integer" then
            return tostring(v)
        end
        return string.format("%.17g(float)", v)
    end
    if type(v) ~= "table" or depth > 3 then
        return tostring(v)
    end
    local keys = {}
    for k in pairs(v) do
        keys[#keys + 1] = k
    end
    table.sort(keys, function(a, b)
        if type(a) == type(b) and (type(a) == "number" or type(a) == "string") then
            return a < b
        end
        return type(a) < type(b)
    end)
    local parts = {}
    for _, k in ipairs(keys) do
        parts[#parts + 1] = "[" .. show(k, depth + 1) .. "]=" .. show(v[k], depth + 1)
    end
    return "{" .. table.concat(parts, ", ") .. "}"
end
M.show = show

local function deep_eq(a, b)
    if type(a) ~= type(b) then
        return false
    end
    if type(a) == "number" then
        -- integers and floats are different things for payload round trips
        return math.type(a) == math.type(b) and a == b
    end
    if type(a) ~= "table" then
        return a == b
    end
    for k, v in pairs(a) do
        if not deep_eq(v, b[k]) then
            return false
        end
    end
    for k in pairs(b) do
        if a[k] == nil then
            return false
        end
    end
    return true
end
M.deep_eq = deep_eq

local function fail(msg, detail)
    failed = failed + 1
    io.stderr:write(string.format("FAIL %s: %s%s\n", where(), msg or "check",
        detail and ("\n     " .. detail) or ""))
    io.stderr:flush()
    return false
end

local function pass()
    checks = checks + 1
    return true
end

-- ok(cond, msg)
function M.ok(cond, msg)
    if cond then
        return pass()
    end
    checks = checks + 1
    return fail(msg, "expected a true value, got " .. show(cond))
end

-- eq(actual, expected, msg): deep equality; integer 1 and float 1.0 differ.
function M.eq(a, b, msg)
    checks = checks + 1
    if deep_eq(a, b) then
        return true
    end
    return fail(msg, "got      " .. show(a) .. "\n     expected " .. show(b))
end

function M.ne(a, b, msg)
    checks = checks + 1
    if not deep_eq(a, b) then
        return true
    end
    return fail(msg, "expected something other than " .. show(b))
end

-- near(actual, expected, eps, msg)
function M.near(a, b, eps, msg)
    checks = checks + 1
    if type(a) == "number" and type(b) == "number" and math.abs(a - b) <= (eps or 1e-9) then
        return true
    end
    return fail(msg, string.format("got %s, expected %s +- %s", show(a), show(b), tostring(eps)))
end

-- between(x, lo, hi, msg): lo <= x <= hi
function M.between(x, lo, hi, msg)
    checks = checks + 1
    if type(x) == "number" and x >= lo and x <= hi then
        return true
    end
    return fail(msg, string.format("got %s, expected in [%s, %s]", show(x), tostring(lo), tostring(hi)))
end

-- matches(str, text, msg): str contains text (plain) or matches it as a Lua pattern
local function contains(s, text)
    if type(s) ~= "string" then
        return false
    end
    if s:find(text, 1, true) then
        return true
    end
    local okp, r = pcall(string.find, s, text)
    return okp and r ~= nil
end

function M.matches(s, text, msg)
    checks = checks + 1
    if contains(s, text) then
        return true
    end
    return fail(msg, "got " .. show(s) .. "\n     expected to contain " .. show(text))
end

-- raises(fn, text, msg): fn must raise an error whose message contains text
-- (plain, or as a Lua pattern). Returns the message.
function M.raises(fn, text, msg)
    checks = checks + 1
    local okc, err = pcall(fn)
    if okc then
        fail(msg or ("expected an error " .. show(text)), "no error was raised")
        return nil
    end
    local s = tostring(err)
    if text and not contains(s, text) then
        fail(msg or "wrong error", "got " .. show(s) .. "\n     expected to contain " .. show(text))
    end
    return s
end

-- no_error(fn, msg): fn must not raise; returns its results
function M.no_error(fn, msg)
    checks = checks + 1
    local r = table.pack(pcall(fn))
    if not r[1] then
        fail(msg or "unexpected error", tostring(r[2]))
        return nil
    end
    return table.unpack(r, 2, r.n)
end

-- fail(msg): an unconditional failure (e.g. in a branch that must not run)
function M.fail(msg)
    checks = checks + 1
    return fail(msg)
end

-- wait_until(cond, timeout, step): polls cond() in a task; returns true once it holds
function M.wait_until(cond, timeout, step)
    local deadline = wq.now() + (timeout or 5)
    while not cond() do
        if wq.now() >= deadline then
            return false
        end
        wq.sleep(step or 0.005)
    end
    return true
end

-- wait_pid(path, timeout): waits until the file at path holds a number (a process writes
-- its pid there); returns it, or nil after timeout seconds
function M.wait_pid(path, timeout)
    local pid
    M.wait_until(function()
        local f = io.open(path)
        pid = f and tonumber(f:read("a"))
        if f then f:close() end
        return pid ~= nil
    end, timeout)
    return pid
end

-- Whether the script runs with --virtual-time: the clock stands still while Lua computes.
do
    local a, x = wq.now(), 0
    for i = 1, 200000 do
        x = x + i
    end
    M.virtual = wq.now() == a
end

-- at(actual, expected, msg, slack): a time measured around a wait. Exact in
-- virtual time; in real time never early (1 ms rounding) and at most slack
-- (default 0.25 s, for loaded machines and sanitizers) late.
function M.at(a, b, msg, slack)
    if M.virtual then
        return M.near(a, b, 1e-6, msg)
    end
    return M.between(a, b - 0.001, b + (slack or 0.25), msg)
end

function M.counts()
    return checks, failed
end

local watchdog
function M.watchdog(seconds)
    if watchdog then
        watchdog:cancel()
    end
    watchdog = wq.after(seconds, function()
        if not finished then
            io.stderr:write(string.format("FAIL %s: watchdog: t.done() not reached within %gs "
                .. "(%d checks, %d failed so far)\n", arg and arg[0] or "?", seconds, checks, failed))
            wq.exit(1)
        end
    end)
end
M.watchdog(tonumber(os.getenv("WQTEST_WATCHDOG")) or 60)

-- done(): summary; exit status 1 if any check failed or no check ran
function M.done()
    finished = true
    if watchdog then
        watchdog:cancel()
        watchdog = nil
    end
    local name = arg and arg[0] or "?"
    if failed > 0 or checks == 0 then
        io.stderr:write(string.format("%s: %d of %d checks FAILED\n", name, failed, checks))
        io.stderr:flush()
        wq.exit(1)
    end
    io.stdout:write(string.format("%s: %d checks passed\n", name, checks))
    io.stdout:flush()
    -- Passed: the status is 0 even when the test dead-lettered keys on purpose (a one-shot
    -- run with dead letters would exit 3).
    wq.exit(0)
end

return M
