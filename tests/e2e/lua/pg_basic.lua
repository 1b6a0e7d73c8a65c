-- PostgreSQL basics (tests/e2e/test_pg_basic.sh): one runner, handlers whose
-- payload says what to do; every run appends a line to the log arg[1]:
--   run QUEUE KEY ATTEMPT TIME PAYLOAD-JSON
--   mode "ok" (or none): success; "err": error("boom KEY"); "fail": wq.fail;
--   "requeue": fails at attempt 1, then requeues with a new payload; "slow": sleeps payload.s.
-- Adds one key from Lua at start ("lua1" in q).
local log = assert(io.open(arg[1], "a"))

local function enc(v)
    if type(v) ~= "table" then
        return v == nil and "null" or string.format("%q", tostring(v))
    end
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = tostring(k) end
    table.sort(keys)
    local parts = {}
    for _, k in ipairs(keys) do parts[#parts + 1] = string.format("%q:%s", k, enc(v[k])) end
    return "{" .. table.concat(parts, ",") .. "}"
end

local function note(qname, key, payload, job, what)
    log:write(string.format("%s %s %s %d %.3f %s\n", what, qname, key, job.attempt, wq.time(), enc(payload)))
    log:flush()
end

local function handler(qname)
    return function(key, payload, job)
        note(qname, key, payload, job, "run")
        local mode = type(payload) == "table" and payload.mode or "ok"
        if mode == "err" then
            error("boom " .. key)
        elseif mode == "fail" then
            return wq.fail("permanent " .. key)
        elseif mode == "requeue" then
            if not payload.new then
                if job.attempt == 1 then
                    error("first run of " .. key .. " fails")
                end
                return wq.requeue(0.2, {mode = "requeue", new = "yes"})
            end
        elseif mode == "slow" then
            wq.sleep(payload.s or 1)
        end
        note(qname, key, payload, job, "end")
    end
end

local q = wq.queue("q", {handler = handler("q"), workers = 4, max_retries = 2,
                         limiter = wq.limiter.exponential(0.05, 0.2)})
wq.queue("prio", {handler = handler("prio"), workers = 1})
q:add("lua1", {mode = "ok", from = "lua"})
