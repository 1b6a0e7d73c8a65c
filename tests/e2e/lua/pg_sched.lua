-- Schedules across runners (tests/e2e/test_pg_schedules.sh): queue "sq"
-- whose handler logs "run KEY TIME NAME" (arg[1] the log, arg[2] the
-- runner's name); every runner defines the same schedules: "tick" every
-- second, and "tock" / "tockskip" every minute (catch_up once / skip).
local log = assert(io.open(arg[1], "a"))
local q = wq.queue("sq", {workers = 4, handler = function(key)
    log:write(string.format("run %s %.3f %s\n", key, wq.time(), arg[2]))
    log:flush()
end})
q:schedule("tick", "@every 1s")
q:schedule("tock", "* * * * *", {catch_up = "once"})
q:schedule("tockskip", "* * * * *", {catch_up = "skip"})
