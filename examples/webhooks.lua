-- Webhook delivery, the most common job there is: events come in over the
-- runner's HTTP API (POST /queues/webhooks/items), each is delivered to its
-- customer's endpoint with wq.http, signed with HMAC-SHA256; per customer
-- at most 2 deliveries at once and 5 per second (group limits), so one
-- slow customer never holds up the others; failures are retried with
-- jittered exponential backoff, a 429/503 waits for its Retry-After (and
-- still counts towards max_retries), a 410 dead-letters at once, and an
-- event delivered once is not delivered again when it is posted again
-- (keep_done).
--
--   wqrun --listen 127.0.0.1:8089 examples/webhooks.lua [API_URL [RECEIVER_PORT]]
--
-- It starts its own receiver (examples/webhook_receiver.py, python3) on
-- 127.0.0.1:8090 with four customers: acme (always 200), globex (429 with
-- Retry-After: 1 for every third delivery), initech (500 the first time it
-- sees an event) and umbrella (410 Gone), posts 52 events to its own API at
-- API_URL (default http://127.0.0.1:8089, the --listen address), waits until
-- every one is delivered or dead-lettered, and prints what the receiver saw.
-- With --db the queue survives restarts; feed it with curl:
--
--   curl -d '{"key":"evt-9","payload":{"customer":"acme","event":"invoice.paid",
--             "url":"http://127.0.0.1:8090/hooks/acme"}}' 127.0.0.1:8089/queues/webhooks/items
local API = arg[1] or "http://127.0.0.1:8089"
local PORT = tonumber(arg[2]) or 8090
local RECEIVER = "http://127.0.0.1:" .. PORT
local SECRET = "whsec_example_only" -- a real sender reads it from its config
local here = (arg[0] or ""):match("^(.*)/") or "."

local q = wq.queue("webhooks", {
    workers = 16,
    max_retries = 8,
    keep_done = 3600, -- an event posted again within the hour is not sent twice
    -- 0.2 s doubling to 5 min, +-20%: endpoints that fail together do not get
    -- their retries back all in the same instant.
    limiter = wq.limiter.exponential(0.2, 300, {jitter = 0.2}),
    group_of = function(_, p) return type(p) == "table" and p.customer or nil end,
    group_limit = {concurrency = 2, rate = 5, burst = 1},
    timeout = 30,
    handler = function(id, p)
        local body = wq.json.encode({id = id, type = p.event, data = p.data})
        local ts = string.format("%d", math.floor(wq.time()))
        local r, err = wq.http{
            method = "POST", url = p.url, body = body, timeout = 10,
            headers = {
                ["Content-Type"] = "application/json",
                ["Webhook-Id"] = id,
                ["Webhook-Timestamp"] = ts,
                ["Webhook-Signature"] = "v1=" .. wq.hmac_sha256(SECRET, ts .. "." .. body),
            },
        }
        if not r then return nil, err end -- no answer: retried with backoff
        if r.status == 410 then return wq.fail("HTTP 410: the endpoint is gone") end
        if r.status == 429 or r.status == 503 then
            return wq.retry_in(tonumber(r.headers["retry-after"]) or 30, "HTTP " .. r.status)
        end
        if r.status >= 300 then return nil, "HTTP " .. r.status end
        return {status = r.status, at = wq.time()} -- kept with keep_done
    end,
})

-- The receiver: a child process for as long as we run (killed when we exit).
wq.spawn(function()
    local r = wq.exec({"python3", here .. "/webhook_receiver.py", PORT, SECRET})
    if r and r.status ~= 0 and r.stderr ~= "" then wq.log("receiver: %s", r.stderr) end
end)
local up = false
for _ = 1, 100 do
    if wq.http{url = RECEIVER .. "/stats", timeout = 1} then up = true break end
    wq.sleep(0.05)
end
assert(up, "the receiver did not start on port " .. PORT .. " (is python3 installed?)")

-- The events, posted to our own HTTP API as an application would.
local customers = {acme = 20, globex = 20, initech = 10, umbrella = 2}
local names = {"acme", "globex", "initech", "umbrella"}
local posted, n = 0, 0
for _, c in ipairs(names) do
    for i = 1, customers[c] do
        n = n + 1
        local item = {key = string.format("evt-%03d", n), payload = {
            customer = c, event = "invoice.paid", data = {invoice = n, amount = 100 * i},
            url = RECEIVER .. "/hooks/" .. c}}
        local r, err = wq.http{method = "POST", url = API .. "/queues/webhooks/items", body = item}
        if r and r.status == 202 then
            posted = posted + 1
        else
            -- No --listen (or another address): add it directly.
            if posted == 0 and n == 1 then
                wq.log("cannot post to %s (%s): adding directly", API, err or ("HTTP " .. r.status))
            end
            q:add(item.key, item.payload)
        end
    end
end
print(("%d events, %d of them posted over HTTP"):format(n, posted))

local started = wq.now()
q:wait_idle()
print(("all delivered or dead-lettered in %.1f s"):format(wq.now() - started))

-- Posting an event again: already delivered, so not sent twice.
local again = wq.http{method = "POST", url = API .. "/queues/webhooks/items",
                      body = {key = "evt-001", payload = {customer = "acme", url = RECEIVER .. "/hooks/acme"}}}
if again then print("posting evt-001 again: HTTP " .. again.status .. " " .. again.body) end

local r = assert(wq.http{url = RECEIVER .. "/stats"})
local s = assert(r:json())
for _, c in ipairs(names) do
    local times = s.arrivals[c] or {}
    local peak = 0 -- the highest rate over 10 consecutive attempts
    for i = 1, #times - 9 do
        peak = math.max(peak, 9 / math.max(times[i + 9] - times[i], 1e-6))
    end
    print(("%-9s %2d delivered, %2d attempts, at most %d at once, peak %.1f/s"):format(
        c, s.ok[c] or 0, s.received[c] or 0, s.max_in_flight[c] or 0, peak))
end
print(("bad signatures: %d"):format(s.bad_signature))
local twice = 0
for _, count in pairs(s.events) do if count > 1 then twice = twice + 1 end end
print(("events delivered twice: %d"):format(twice))
for _, d in ipairs(q:dead()) do
    print(("dead letter %s after %d attempt(s): %s"):format(d.key, d.attempts, d.error))
end
wq.http{method = "POST", url = RECEIVER .. "/quit"}
-- The 410 is dead-lettered on purpose: this demo succeeded (without this, a
-- run with dead letters exits 3).
wq.exit(0)
