-- Flows against the same jobs without a flow (SPEC 9.3), in one process:
--
--   wqrun [--db FILE|URL] bench/flows/flows.lua MODE N [M]
--
-- MODE plain    N independent no-op jobs: the baseline
--      fanin    a flow of N no-op parts fanning into one join
--      many     N flows of M nodes each (M - 1 parts into a join), all at once
-- Prints "<name> <value> <unit>" lines: the rate of adding (the add calls, or the flow
-- commits, to the moment the producer has its answer), the jobs/s from the first add to the
-- last job done (the join included), and for flows the time from each join's last
-- dependency's finish to the join's start (p50, p99, max, in ms). On PostgreSQL the producer
-- adds through add_many batches of 1,000 (the plain jobs) or one commit per flow.
local mode, n, m = arg[1], tonumber(arg[2]), tonumber(arg[3] or 0)
assert(mode == "plain" or mode == "fanin" or mode == "many", "MODE: plain, fanin or many")
assert(n and n > 0, "N: a number > 0")
local WORKERS = tonumber(os.getenv("BENCH_WORKERS") or "8")

local finished = 0                   -- jobs done (parts and joins)
local last_finish = {}               -- flow index -> wq.now() of its latest part's finish
local lat = {}                       -- join start - its last part's finish, seconds
local total = mode == "plain" and n or mode == "fanin" and n + 1 or n * m
local t0, t_end

local function finish_one()
    finished = finished + 1
    if finished == total then t_end = wq.now() end
end

-- The parts carry no payload, as the plain jobs: a part's flow is its key's prefix ("7-p3").
local parts = wq.queue("bench_parts", {workers = WORKERS, handler = function(key)
    local f = mode == "plain" and nil or (mode == "fanin" and 1 or tonumber(key:match("^(%d+)-")))
    if f then
        local now = wq.now()
        if not last_finish[f] or now > last_finish[f] then last_finish[f] = now end
    end
    finish_one()
end})
local joins = wq.queue("bench_joins", {workers = WORKERS, handler = function(key, payload, job)
    local start = wq.now()
    local f = payload.f
    if last_finish[f] then lat[#lat + 1] = start - last_finish[f] end
    assert(#job.deps == (mode == "fanin" and n or m - 1), "a join sees every dependency")
    finish_one()
end})

local function pct(xs, p)
    table.sort(xs)
    if #xs == 0 then return 0 end
    return xs[math.max(1, math.ceil(#xs * p))]
end

local function report(label, added_s)
    print(("%s_add_rate %.0f items/s"):format(label, total / added_s))
    print(("%s_jobs_per_s %.0f jobs/s"):format(label, total / (t_end - t0)))
    print(("%s_seconds %.3f s"):format(label, t_end - t0))
    if mode ~= "plain" then
        local copy = {table.unpack(lat)}
        print(("%s_join_latency_p50 %.3f ms"):format(label, pct(copy, 0.5) * 1000))
        print(("%s_join_latency_p99 %.3f ms"):format(label, pct(copy, 0.99) * 1000))
        print(("%s_join_latency_max %.3f ms"):format(label, pct(copy, 1) * 1000))
        print(("%s_joins_measured %d joins"):format(label, #lat))
    end
end

parts:pause() -- nothing runs before every add is in: the run is measured on its own
joins:pause()
t0 = wq.now()
if mode == "plain" then
    -- 64 producers: on PostgreSQL each add waits for its commit, and the adds of the
    -- producers waiting together go in one batch (add_many)
    local left, P = 64, 64
    for k = 1, P do
        wq.spawn(function()
            for i = k, n, P do parts:add("p" .. i) end
            left = left - 1
        end)
    end
    while left > 0 do wq.sleep(0.001) end
elseif mode == "fanin" then
    local f = wq.flow("bench-fanin")
    local hs = {}
    for i = 1, n do hs[i] = f:add(parts, "p" .. i) end
    f:add(joins, "join", {f = 1}, {after = hs})
    f:commit()
else
    for k = 1, n do
        local f = wq.flow("bench-" .. k)
        local hs = {}
        for i = 1, m - 1 do hs[i] = f:add(parts, k .. "-p" .. i) end
        f:add(joins, k .. "-join", {f = k}, {after = hs})
        f:commit()
    end
end
local added = wq.now() - t0
local label = mode == "many" and ("many_" .. n .. "x" .. m) or (mode .. "_" .. n)
t0 = wq.now()
parts:resume()
joins:resume()
while not t_end do wq.sleep(0.01) end
report(label, added)
