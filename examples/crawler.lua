-- A polite crawler: fetches URLs with wq.http, at most 2 requests at once and
-- 5 per second to each host, however many hosts there are; one slow host
-- never holds up the others (per-group limits, docs/lua-api.md "Group
-- limits"). With --db it remembers finished URLs for a day, so a run that
-- was interrupted goes on where it stopped.
--
--   wqrun --db crawl.db examples/crawler.lua URL... | @FILE_OF_URLS
--
-- Without URLs it crawls wqrun's own HTTP server under two host names, one
-- of them limited to 2 requests/s (start it with --listen):
--
--   wqrun --listen 127.0.0.1:8089 examples/crawler.lua
local urls = {}
for _, a in ipairs(arg) do
    if a:sub(1, 1) == "@" then
        for line in assert(io.open(a:sub(2))):lines() do
            if line:match("%S") then urls[#urls + 1] = line:match("^%s*(.-)%s*$") end
        end
    else
        urls[#urls + 1] = a
    end
end
local demo = #urls == 0
if demo then -- the same server as two hosts: 127.0.0.1 and localhost
    for i = 1, 30 do
        urls[#urls + 1] = "http://127.0.0.1:8089/healthz?page=" .. i
        urls[#urls + 1] = "http://localhost:8089/queues?page=" .. i
    end
end

local fetched, bytes, per_host = 0, 0, {}
local started = wq.now()

local q = wq.queue("crawl", {
    workers = 16,
    keep_done = 86400, -- a second run skips what the first one finished
    max_retries = 3,
    group_of = function(url) return url:match("^%a+://([^/:]+)") or "?" end,
    group_limit = {concurrency = 2, rate = 5, burst = 1},
    limiter = wq.limiter.exponential(0.5, 60, {jitter = 0.2}), -- retries of many URLs spread out
    handler = function(url, _, job)
        local r, err = wq.http{url = url, timeout = 10, redirects = 5,
                               headers = {["User-Agent"] = "wqrun-crawler-example"}}
        if not r then return nil, err end -- no answer (DNS, refused, timeout): retried
        local code, size = r.status, #r.body
        if code == 404 or code == 410 then
            return wq.fail("HTTP " .. code) -- permanent: no retry
        elseif code == 429 or code == 503 then -- the host asks us to slow down
            return wq.retry_in(tonumber(r.headers["retry-after"]) or 5, "HTTP " .. code)
        elseif code >= 500 then
            return nil, "HTTP " .. code -- retried with backoff
        end
        fetched, bytes = fetched + 1, bytes + size
        local h = per_host[job.group] or {n = 0, first = wq.now()}
        h.n, h.last = h.n + 1, wq.now()
        per_host[job.group] = h
        return {status = code, bytes = size}
    end,
})
if demo then
    q:set_group_limit("localhost", {concurrency = 1, rate = 2, burst = 1}) -- the "slow host"
end

for _, url in ipairs(urls) do
    q:add(url)
end

local function summary()
    local took = wq.now() - started
    print(("fetched %d pages, %d bytes in %.1f s"):format(fetched, bytes, took))
    local hosts = {}
    for h in pairs(per_host) do hosts[#hosts + 1] = h end
    table.sort(hosts)
    for _, name in ipairs(hosts) do
        local h = per_host[name]
        local span = h.last - h.first
        print(("  %-24s %4d pages in %5.1f s (%.1f/s)"):format(name, h.n, span, span > 0 and (h.n - 1) / span or 0))
    end
    local dead = q:dead()
    if #dead > 0 then print(("%d URLs failed for good, e.g. %s: %s"):format(#dead, dead[1].key, dead[1].error)) end
end
wq.on_shutdown(summary) -- Ctrl-C prints what was done so far

q:wait_idle()
summary()
-- Pages that failed for good are part of crawling the web, not a failed run
-- (without this, a run with dead letters exits 3).
wq.exit(0)
