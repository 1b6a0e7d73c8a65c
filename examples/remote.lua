-- remote.lua: a queue whose work is done elsewhere (SPEC 10.2). The queue
-- "thumbs" has no handler: workers on any machine, in any language, claim
-- its items over HTTP, run them and report back; the runner keeps every
-- rule (retries, dead letters, cancel, exclusivity) as for a Lua handler.
-- The script adds a few photos to make thumbnails of; the Python worker
-- examples/remote_worker.py (on contrib/python/wqrun_worker.py) does the work.
--
--   build/wqrun --serve --listen 127.0.0.1:8080 --db remote.db examples/remote.lua
--   python3 examples/remote_worker.py http://127.0.0.1:8080
--
-- More items, from anywhere:
--   curl -X POST 127.0.0.1:8080/queues/thumbs/items \
--        -d '{"key": "beach.jpg", "payload": {"w": 4032, "h": 3024}}'
--   curl 127.0.0.1:8080/queues/thumbs/items/beach.jpg     # its result
--
-- "broken.jpg" (no size) fails for good at once (the worker raises Fail);
-- "huge.jpg" is retried (Retry) and made on its second attempt. A worker
-- that dies mid-job loses its lease within `lease` seconds, and the item is
-- handed out again to another worker.

local thumbs = wq.queue("thumbs", {
    max_retries = 2, -- a failing photo is tried 3 times, then dead-lettered
    limiter = wq.limiter.exponential(0.5, 10),
    keep_done = 86400, -- results answered by GET .../items/KEY for a day
})

local photos = {
    ["cat.jpg"] = {w = 4032, h = 3024},
    ["dog.jpg"] = {w = 3024, h = 4032},
    ["pano.jpg"] = {w = 12000, h = 2000},
    ["icon.png"] = {w = 64, h = 64},
    ["huge.jpg"] = {w = 30000, h = 20000},
    ["broken.jpg"] = {},
}
local n = 0
for key, size in pairs(photos) do
    if thumbs:add(key, size) then n = n + 1 end
end
wq.log("thumbs: %d photos queued; waiting for remote workers", n)
