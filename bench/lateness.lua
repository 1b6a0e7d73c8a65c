-- Delay accuracy benchmark (issue 3): 100,000 add_after with random delays
-- in [0, 1 s], in real time; each handler run records how late it started
-- compared with the time it was due. Prints p50 / p99 / max lateness.
--   wqrun --quiet bench/lateness.lua [N]
-- Due times live in a Lua array indexed by key (no payload), and both arrays
-- are sized before the clock starts: the numbers measure wqrun's timers and
-- scheduling, not JSON or table growth in the benchmark itself.
local N = tonumber(arg[1]) or 100000
math.randomseed(42)
local due, late = {}, {}
for i = 1, N do
    due[i], late[i] = 0, 0
end
local n = 0
local q = wq.queue("late", {handler = function(key)
    n = n + 1
    late[n] = wq.now() - due[tonumber(key)]
end})
for i = 1, N do
    local d = math.random()
    due[i] = wq.now() + d -- due: the time of this call plus the delay
    q:add_after(i, d)
    -- A cooperative producer yields now and then, or nothing else runs meanwhile.
    if i % 100 == 0 then wq.sleep(0) end
end
while n < N do wq.sleep(0.05) end
table.sort(late)
local function pct(p) return late[math.max(1, math.ceil(p * N))] * 1000 end
print(string.format("add_after_lateness_p50 %.4f ms", pct(0.50)))
print(string.format("add_after_lateness_p99 %.4f ms", pct(0.99)))
print(string.format("add_after_lateness_max %.4f ms", late[N] * 1000))
