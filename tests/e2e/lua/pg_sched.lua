-- Schedules across runners (tests/e2e/test_pg_schedules.sh): queue "sq"
-- whose handler logs "run KEY TIME NAME" (arg[1] the log, arg[2] the
-- runner's name); every runner defines the same schedules: "tick" every
-- second, "tock" / "tockskip" every minute (catch_up once / skip), and
-- "b1".."b20" every minute, defined in the opposite order by runner r2 (so
-- that runners fire the same times in different orders).
local log = assert(io.open(arg[1], "a"))
local q = wq.queue("sq", {workers = 4, handler = function(key)
    log:write(string.format("run %s %.3f %s\n", key, wq.time(), arg[2]))
    log:flush()
end})
q:schedule("tick", "@every 1s")
q:schedule("tock", "* * * * *", {catch_up = "once"})
q:schedule("tockskip", "* * * * *", {catch_up = "skip"})
local first, last, step = 1, 20, 1
if arg[2] == "r2" then first, last, step = 20, 1, -1 end
for i = first, last, step do
    q:schedule("b" .. i, "* * * * *")
end
