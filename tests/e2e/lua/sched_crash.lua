-- Used by test_sched_crash.sh: a schedule every 200 ms; the handler logs
-- the schedule's last_at (the time of the latest fire, at or after the one
-- that added this item) and the item's enqueued_at (when that fire added
-- it; a restored item keeps the time from before the restart) to arg[1].
local log = assert(io.open(arg[1], "a"))
log:setvbuf("line")
local q = wq.queue("ticks", {handler = function(_, _, job)
    log:write(("%.6f %.6f\n"):format(job.queue:schedules()[1].last_at, job.enqueued_at))
end})
q:schedule("tick", "@every 200ms")
