-- backends: all
-- wq.retry_in(seconds, err): a failure that counts (attempts go up,
-- max_retries dead-letters) retried after the handler's own delay, not the
-- limiter's; and limiters' jitter option (+-fraction of the delay).
local t = require "wqtest"
t.watchdog(30)

do -- the given delay replaces the limiter's, and the failure counts
    local runs = {}
    local q = wq.queue("ri", {limiter = wq.limiter.exponential(30, 30), max_retries = 5,
        handler = function(key, payload, job)
            runs[#runs + 1] = {wq.now(), job.attempt}
            if job.attempt == 1 then
                return wq.retry_in(0.3, "429 Too Many Requests")
            elseif job.attempt == 2 then
                error(wq.retry_in(0.1, "raised"))
            end
        end})
    q:add("k")
    t.wait_until(function() return #runs == 3 end, 5)
    t.eq(#runs, 3, "two retries, then success")
    t.eq(runs[2][2], 2, "a retry_in counts a failure: attempt 2")
    t.eq(runs[3][2], 3, "raised retry_in counts too: attempt 3")
    t.between(runs[2][1] - runs[1][1], 0.29, 2, "retried after the given 0.3 s, not the limiter's 30 s")
    t.between(runs[3][1] - runs[2][1], 0.09, 2, "raised: after 0.1 s")
end

do -- max_retries still applies: dead-lettered with the message, on_dead told
    local runs, dead = 0, nil
    local q = wq.queue("ri_dead", {max_retries = 2,
        on_dead = function(key, payload, err, attempts) dead = {key, err, attempts} end,
        handler = function()
            runs = runs + 1
            return wq.retry_in(0.01, "503 again")
        end})
    q:add("k")
    t.wait_until(function() return dead ~= nil end, 5)
    t.eq(runs, 3, "first run and max_retries = 2 retries")
    t.eq(dead and dead[2], "503 again", "the dead letter keeps the message")
    t.eq(dead and dead[3], 3, "attempts")
    local letters
    t.wait_until(function() letters = q:dead(); return #letters == 1 end, 5) -- PostgreSQL: once committed
    t.eq(#letters, 1)
    t.eq(letters[1] and letters[1].error, "503 again")
end

do -- a later success clears the count (as after any failure)
    local attempts = {}
    local q = wq.queue("ri_ok", {max_retries = 1,
        handler = function(key, payload, job)
            attempts[#attempts + 1] = job.attempt
            if #attempts == 1 or #attempts == 3 then
                return wq.retry_in(0, "once")
            end
        end})
    q:add("k")
    t.wait_until(function() return #attempts == 2 end, 5)
    q:add("k")
    t.wait_until(function() return #attempts == 4 end, 5)
    t.eq(attempts, {1, 2, 1, 2}, "the count starts over after a success")
end

do -- tostring and argument errors
    t.eq(tostring(wq.retry_in(1, "x")), "x")
    t.eq(tostring(wq.retry_in(1)), "failed")
    t.raises(function() wq.retry_in(-1, "x") end, "retry_in: bad argument 'seconds'")
    t.raises(function() wq.retry_in("soon", "x") end, "retry_in: bad argument 'seconds'")
    t.raises(function() wq.retry_in(0 / 0, "x") end, "retry_in: bad argument 'seconds'")
end

do -- jitter: +-fraction around the child's delay, different per call
    local l = wq.limiter.fast_slow(1, 1, 0, {jitter = 0.2})
    local seen, lo, hi = {}, math.huge, 0
    for i = 1, 200 do
        local d = l:when("k" .. i)
        seen[d] = true
        lo, hi = math.min(lo, d), math.max(hi, d)
    end
    local distinct = 0
    for _ in pairs(seen) do distinct = distinct + 1 end
    t.ok(distinct > 150, "delays differ: " .. distinct .. " distinct of 200")
    t.between(lo, 0.8, 0.9, "the lowest of 200 draws is near -20%")
    t.between(hi, 1.1, 1.2, "the highest of 200 draws is near +20%")
    local e = wq.limiter.exponential(0.001, 1000, {jitter = 0.1})
    t.between(e:when("a"), 0.0009, 0.0011)
    t.between(e:when("a"), 0.0018, 0.0022, "the backoff still doubles")
    t.eq(e:num_requeues("a"), 2)
    e:forget("a")
    t.eq(e:num_requeues("a"), 0)
    local w = wq.limiter.with_jitter(wq.limiter.max_of(wq.limiter.fast_slow(2, 2, 0)), 0.5)
    t.between(w:when("x"), 1, 3)
    local d = wq.limiter.default({jitter = 0.1})
    t.between(d:when("x"), 0.0045, 0.0055, "default: 5 ms +-10%")
    local b = wq.limiter.bucket(1, 1, {jitter = 0.1})
    t.eq(b:when("x"), 0.0, "the burst token: no wait, jittered or not")
    t.between(b:when("y"), 0.85, 1.15, "the next token in about 1 s +-10%")
    t.raises(function() wq.limiter.exponential(1, 2, {jitter = 2}) end,
        "exponential: bad argument 'jitter' (a fraction from 0 to 1 expected)")
    t.raises(function() wq.limiter.exponential(1, 2, {jitter = -0.1}) end,
        "exponential: bad argument 'jitter'")
    t.raises(function() wq.limiter.exponential(1, 2, {jiter = 0.1}) end,
        "exponential: bad argument 'opts' (unknown option 'jiter')")
    t.raises(function() wq.limiter.default(0.1) end, "default: bad argument 'opts'")
    t.raises(function() wq.limiter.with_jitter({}, 0.1) end, "with_jitter: bad argument 'limiter'")
    t.raises(function() wq.limiter.with_jitter(wq.limiter.default(), 1.5) end,
        "with_jitter: bad argument 'fraction'")
end

do -- a queue with a jittered limiter: keys that fail together retry apart
    local second = {}
    local q = wq.queue("herd", {workers = 50, max_retries = 3,
        limiter = wq.limiter.fast_slow(0.5, 0.5, 0, {jitter = 0.5}),
        handler = function(key, payload, job)
            if job.attempt == 1 then error("fail together") end
            second[#second + 1] = wq.now()
        end})
    local t0 = wq.now()
    for i = 1, 50 do q:add("k" .. i) end
    t.wait_until(function() return #second == 50 end, 5)
    table.sort(second)
    t.ok(second[50] - second[1] > 0.2,
        string.format("the retries spread over %.3f s (0.25..0.75 s expected)", second[50] - second[1]))
    t.between(second[1] - t0, 0.2, 0.8)
end

t.done()
