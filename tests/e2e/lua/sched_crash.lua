-- Used by test_sched_crash.sh: a schedule every 200 ms; the handler logs
-- the schedule's last_at (the time of the fire that added it) to arg[1].
local log = assert(io.open(arg[1], "a"))
log:setvbuf("line")
local q
q = wq.queue("ticks", {handler = function()
    log:write(("%.6f\n"):format(q:schedules()[1].last_at))
end})
q:schedule("tick", "@every 200ms")
