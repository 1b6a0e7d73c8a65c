-- Runner script for tests/e2e/test_http.sh (run with --listen; the listener
-- keeps the process alive until SIGTERM). arg[1]: file the handlers append one
-- JSON line per run to: {q=, key=, payload=, t=wq.time(), seq=, attempt=}.
local cjson = require "cjson"

local out = assert(io.open(assert(arg[1], "usage: http_api.lua OUTFILE"), "a"))
local seq = 0
local function record(q, key, payload, attempt)
  seq = seq + 1
  out:write(cjson.encode({q = q, key = key, payload = payload, t = wq.time(), seq = seq,
                          attempt = attempt}), "\n")
  out:flush()
end

-- No handler: items stay queued (and in the state file with --db).
wq.queue("held")
wq.queue("misc")

-- Records every item it gets.
wq.queue("work", {handler = function(key, payload) record("work", key, payload) end})

-- Fails the first two runs of each key, then succeeds.
local attempts = {}
wq.queue("flaky", {
  max_retries = 5,
  limiter = wq.limiter.exponential(0.001, 0.01),
  handler = function(key, payload)
    attempts[key] = (attempts[key] or 0) + 1
    record("flaky", key, payload, attempts[key])
    if attempts[key] <= 2 then error("planned failure " .. attempts[key]) end
  end,
})

-- One worker; "block" holds it until a key is posted to "ctl", so the items
-- posted meanwhile queue up behind it and come out in priority order.
local released = false
wq.queue("gated", {
  workers = 1,
  handler = function(key, payload)
    while key == "block" and not released do wq.sleep(0.02) end
    record("gated", key, payload)
  end,
})
wq.queue("ctl", {handler = function() released = true end})
