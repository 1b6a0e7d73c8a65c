-- Schedules (SPEC 7.3), in virtual time: q:schedule adds its key at every
-- time the spec matches; dedup keeps a slow job from piling up; a pending
-- schedule alone does not keep the script alive.
local t = require "wqtest"
t.watchdog(3600 * 24 * 3)

local runs = {}
local q = wq.queue("cron", {handler = function(key, payload)
    runs[#runs + 1] = {key, payload and payload.n, wq.time()}
end})

t.eq(q:schedule("every", "@every 10s", {payload = {n = 1}}), nil, "schedule returns nothing")
local s = q:schedules()
t.eq(#s, 1)
t.eq(s[1].name, "every")
t.eq(s[1].spec, "@every 10s")
t.eq(s[1].key, "every", "the key defaults to the name")
t.near(s[1].next_at, wq.time() + 10, 0.01, "next_at")
t.eq(s[1].last_at, nil, "never ran yet")
wq.sleep(35)
t.eq(#runs, 3, "three runs in 35 s")
t.eq(runs[1][2], 1, "with the payload")
t.near(runs[2][3] - runs[1][3], 10, 0.01, "10 s apart")
t.near(q:schedules()[1].last_at, runs[3][3], 0.01, "last_at")
t.eq(q:unschedule("every"), true)
t.eq(q:unschedule("every"), false, "gone")
wq.sleep(30)
t.eq(#runs, 3, "no more runs after unschedule")

-- a cron spec, on the clock's minute boundaries, with its own key
runs = {}
q:schedule("five", "*/5 * * * *", {key = "report"})
local nxt = q:schedules()[1].next_at
t.eq(nxt % 300, 0.0, "next_at is on a 5-minute boundary")
t.between(nxt - wq.time(), 0, 300, "within 5 minutes")
wq.sleep(nxt - wq.time() + 601)
t.eq(#runs, 3, "at each boundary")
t.eq(runs[1][1], "report", "opts.key")
t.eq(runs[2][3] - runs[1][3], 300.0, "5 minutes apart")

-- defining the same name again replaces the spec
q:schedule("five", "@hourly")
t.eq(#q:schedules(), 1, "still one schedule")
t.eq(q:schedules()[1].spec, "@hourly")
t.eq(q:schedules()[1].next_at % 3600, 0.0, "on the hour")
q:unschedule("five")

-- dedup: a slow job is not piled up
local slow_runs = 0
local slow = wq.queue("slow", {handler = function()
    slow_runs = slow_runs + 1
    wq.sleep(25)
end})
slow:schedule("tick", "@every 10s")
wq.sleep(100)
slow:unschedule("tick")
t.between(slow_runs, 3, 5, "a 25 s job on a 10 s schedule runs about every 25-30 s, not piled up")
t.eq(slow:stats().depth <= 1, true, "at most one waiting")

-- bad specs and options are argument errors naming the problem
t.raises(function() q:schedule("bad", "61 * * * *") end, "schedule: bad argument 'spec' (field 1 (minute)")
t.raises(function() q:schedule("bad", "@every 0s") end, "schedule: bad argument 'spec'")
t.raises(function() q:schedule("bad", "@sometimes") end, "schedule: bad argument 'spec'")
t.raises(function() q:schedule("bad", "* * * *") end, "schedule: bad argument 'spec'")
t.raises(function() q:schedule("bad", "@daily", {tz = "mars"}) end, "schedule: bad argument 'tz'")
t.raises(function() q:schedule("bad", "@daily", {catch_up = "all"}) end, "schedule: bad argument 'catch_up'")
t.raises(function() q:schedule("bad", "@daily", {payload = print}) end, "schedule: bad argument 'payload'")
t.raises(function() q:schedule(1, "@daily") end, "schedule: bad argument 'name'")
t.raises(function() q:unschedule(nil) end, "unschedule: bad argument 'name' (string expected, got nil)")
t.eq(#q:schedules(), 0, "nothing was added by the failed calls")

-- the last thing: a pending schedule does not keep the script alive
q:schedule("forever", "@every 1s")
t.done()
