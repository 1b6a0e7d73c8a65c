-- The Lua half of the wq module: what reads better in Lua and is not on a
-- hot path. The binary carries this file (scripts/embed-lua.cmake) and runs
-- it once at start-up with the wq table and the C functions it builds on;
-- nothing of those internals is reachable from scripts except through wq.
local wq, c = ...

local format, gsub, select, sort, tostring, error, pcall =
    string.format, string.gsub, select, table.sort, tostring, error, pcall

-- wq.log(fmt, ...): string.format's rules, one timestamped line on stderr
-- (above the progress line). A single argument is written as tostring gives it.
-- string.format's errors name wq.log and the argument ('fmt', or '#2' for the
-- first value); a NUL byte is written as \0 rather than ending the line there.
local function format_error(msg)
    local n, why = tostring(msg):match("^bad argument #(%d+) to '[^']*' %((.*)%)$")
    if n == "1" then
        return format("log: bad argument 'fmt' (%s)", why)
    elseif n then
        return format("log: bad argument '#%d' (%s)", n, why)
    end
    return format("log: bad argument 'fmt' (%s)", tostring(msg))
end

function wq.log(...)
    local n = select("#", ...)
    local line
    if n == 0 then
        error("log: bad argument 'fmt' (value expected)", 2)
    elseif n == 1 then
        line = tostring((...))
    else
        local ok, s = pcall(format, ...)
        if not ok then
            error(format_error(s), 2)
        end
        line = s
    end
    c.log((gsub(line, "%z", "\\0")))
end

-- q:dead(): the dead letters, oldest first (then by key), so a listing is
-- stable from one call to the next.
local dead_list = c.dead_list

local function older(a, b)
    if a.failed_at ~= b.failed_at then
        return a.failed_at < b.failed_at
    end
    return a.key < b.key
end

function c.queue_methods.dead(q)
    local list = dead_list(q)
    sort(list, older)
    return list
end

-- wq.on_shutdown(fn): fn() runs when a graceful stop begins (the first
-- SIGINT/SIGTERM, or wq.shutdown()), while handlers drain, within --grace.
-- The hooks run one after the other in one task, in registration order; a
-- hook that raises is reported, the others still run, and the process then
-- exits with status 1.
local hooks = {}

function wq.on_shutdown(fn)
    if type(fn) ~= "function" then
        error(format("on_shutdown: bad argument 'fn' (function expected, got %s)", type(fn)), 2)
    end
    hooks[#hooks + 1] = fn
end

function c.shutdown_hooks()
    if #hooks == 0 then
        return nil
    end
    return function()
        local failed = false
        for i = 1, #hooks do
            local ok, err = pcall(hooks[i])
            if not ok then
                failed = true
                c.log("wqrun: error in an on_shutdown hook: " .. tostring(err))
            end
        end
        c.hooks_done(failed)
    end
end
