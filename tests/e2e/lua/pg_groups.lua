-- Group limits across runners (tests/e2e/test_pg_groups.sh). arg[1] the log
-- ("start QUEUE KEY GROUP TIME NAME" and "end ..."), arg[2] the runner's name.
--   "c": concurrency 2 per group, 8 workers, each run 0.1 s;
--   "r": rate 5/s per group (burst 1), instant runs;
--   "s": concurrency 1 per group, instant runs (one item after the other);
--   "crawl": group_of = the host of the URL key; 2 at once per host, and
--            per-host rates set with q:set_group_limit by the test's first
--            runner (arg[3] == "setup"): fast.example 50/s, slow.example 2/s.
local log = assert(io.open(arg[1], "a"))
local name = arg[2]
local function note(what, queue, key, grp)
    log:write(string.format("%s %s %s %s %.4f %s\n", what, queue, key, grp or "-", wq.time(), name))
    log:flush()
end
local function handler(queue, secs)
    return function(key, _, job)
        note("start", queue, key, job.group)
        if secs > 0 then wq.sleep(secs) end
        note("end", queue, key, job.group)
    end
end
wq.queue("c", {workers = 8, group_limit = {concurrency = 2}, handler = handler("c", 0.1)})
wq.queue("r", {workers = 8, group_limit = {rate = 5, burst = 1}, handler = handler("r", 0)})
wq.queue("s", {workers = 8, group_limit = {concurrency = 1}, handler = handler("s", 0)})
local crawl = wq.queue("crawl", {
    workers = 16,
    group_limit = {concurrency = 4},
    group_of = function(url) return url:match("^https?://([^/]+)") end,
    handler = handler("crawl", 0.01),
})
if arg[3] == "setup" then
    crawl:set_group_limit("fast.example", {concurrency = 4, rate = 50, burst = 1})
    crawl:set_group_limit("slow.example", {concurrency = 1, rate = 2, burst = 1})
    print("limits set")
    io.stdout:flush()
end
