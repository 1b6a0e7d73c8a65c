-- The Lua half of the wq module: what reads better in Lua and is not on a
-- hot path. The binary carries this file (scripts/embed-lua.cmake) and runs
-- it once at start-up with the wq table and the C functions it builds on;
-- nothing of those internals is reachable from scripts except through wq.
local wq, c = ...

local format, select, sort, tostring, error = string.format, select, table.sort, tostring, error

-- wq.log(fmt, ...): string.format's rules, one timestamped line on stderr
-- (above the progress line). A single argument is written as tostring gives it.
function wq.log(...)
    local n = select("#", ...)
    if n == 0 then
        error("log: bad argument 'fmt' (value expected)", 2)
    elseif n == 1 then
        c.log(tostring((...)))
    else
        c.log(format(...))
    end
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
