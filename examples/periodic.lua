-- periodic.lua: periodic work with wq.every, and polling with delayed
-- re-checks through wq.requeue.
--
-- A simulated cloud provisions machines: a timer (wq.every) orders a new
-- machine every 0.4 s until ten are ordered; each order puts the machine's
-- id on a "poll" queue whose handler asks the (simulated) cloud for its
-- status. A machine that is still booting is not a failure: the handler
-- returns wq.requeue(delay) and is asked again later, with a delay that
-- grows per machine (a wq.backoff: 0.25, 0.5, 1, 1, ... s). A machine
-- that ends up "failed" raises an error: that is retried through the
-- queue's limiter and, since the failure is permanent, dead-lettered
-- after max_retries. A second timer prints a status line every second and,
-- once every machine is ready or dead, cancels both timers; with nothing
-- left to wait for, wqrun exits on its own, with status 3: the machine that
-- never came up was dead-lettered (cron or systemd would alert).
--
--   build/wqrun examples/periodic.lua
--   build/wqrun --virtual-time examples/periodic.lua   # the same, without waiting
--
-- Takes about 8 seconds.

math.randomseed(tonumber(arg[1]) or 7)

-- ---- the simulated cloud ----

local machines = {} -- id -> {ordered=, ready_at=, fails=}
local order = {}    -- ids, in order

local function cloud_create(id)
    machines[id] = {
        ordered = wq.now(),
        ready_at = wq.now() + 1 + math.random() * 4, -- boots in 1-5 s
        fails = #order == 6, -- the seventh one never comes up
    }
    order[#order + 1] = id
end

local function cloud_status(id)
    local m = machines[id]
    if wq.now() < m.ready_at then return "booting" end
    return m.fails and "failed" or "running"
end

-- ---- polling ----

local ready, polls, backoffs = {}, 0, {}

local poll = wq.queue("poll", {
    workers = 3,
    max_retries = 2,
    limiter = wq.limiter.exponential(0.2, 1),
    handler = function(id)
        polls = polls + 1
        wq.sleep(0.01) -- the API round trip
        local status = cloud_status(id)
        if status == "booting" then
            -- Not ready yet: check again later. Not a failure.
            backoffs[id] = backoffs[id] or wq.backoff{duration = 0.25, factor = 2, cap = 1, steps = 10}
            return wq.requeue(backoffs[id]:step())
        elseif status == "failed" then
            error(id .. " failed to boot") -- retried, then dead-lettered
        end
        ready[id] = wq.now() - machines[id].ordered
        backoffs[id] = nil
        wq.log("%s is running (%.1fs after the order)", id, ready[id])
    end,
})

-- ---- periodic work ----

local creator
creator = wq.every(0.4, function()
    local id = ("vm-%02d"):format(#order + 1)
    cloud_create(id)
    poll:add(id)
    wq.log("ordered %s", id)
    if #order == 10 then creator:cancel() end
end)

local reporter
reporter = wq.every(1, function()
    local s = poll:stats()
    local nready = 0
    for _ in pairs(ready) do nready = nready + 1 end
    wq.log("status: %d ordered, %d running, %d dead, %d still booting",
           #order, nready, s.dead, #order - nready - s.dead)
    if not creator:pending() and nready + s.dead == #order then
        reporter:cancel() -- nothing pending any more: wqrun exits on its own
        print(("%-6s %s"):format("id", "result"))
        for _, id in ipairs(order) do
            print(("%-6s %s"):format(id, ready[id] and ("running after %.1fs"):format(ready[id])
                                                   or "dead"))
        end
        for _, d in ipairs(poll:dead()) do
            print(("dead letter: %s, %d attempts: %s"):format(d.key, d.attempts, d.error))
        end
        print(("%d status polls, %d delayed re-checks (wq.requeue)"):format(polls, s.requeued))
    end
end)
