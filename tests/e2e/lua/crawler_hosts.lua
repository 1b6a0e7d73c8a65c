-- Used by test_groups.sh (under --virtual-time): the crawler of issue 11.
-- Two hosts, one allowing 50 requests/s, the other 2/s; 10 workers; each
-- request takes 50 ms. Per-group rates must keep the fast host at its rate
-- while the slow one is throttled (no head-of-line blocking). Prints, per
-- second of the first 30, how many requests each host got.
local per_second = {fast = {}, slow = {}}
local start = wq.now()
local q = wq.queue("crawl", {
    workers = 10,
    group_of = function(url) return url:match("^https?://([^/]+)") end,
    handler = function(url, _, job)
        local sec = math.floor(wq.now() - start)
        local host = job.group:match("^(%a+)")
        per_second[host][sec] = (per_second[host][sec] or 0) + 1
        wq.sleep(0.05) -- the request
    end,
})
q:set_group_limit("fast.example", {rate = 50, burst = 1})
q:set_group_limit("slow.example", {rate = 2, burst = 1})
for i = 1, 3000 do
    q:add(("http://slow.example/page/%d"):format(i))
    q:add(("http://fast.example/page/%d"):format(i))
end
wq.sleep(30)
local s = q:stats()
print(("stats groups %d throttled %d"):format(s.groups, s.throttled))
for sec = 0, 29 do
    print(("second %d fast %d slow %d"):format(sec, per_second.fast[sec] or 0, per_second.slow[sec] or 0))
end
os.exit(0)
