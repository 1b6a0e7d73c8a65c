-- Holds the loop without yielding: in the main chunk, a handler, a spawned
-- task and a timer callback; a timer due meanwhile fires late, which
-- /metrics shows.
local port = arg[1]
local fired
wq.after(0.1, function() fired = true end)
local c = os.clock()
while os.clock() - c < 1.3 do end -- line 8: the main chunk holds the loop
wq.sleep(0.01)
assert(fired, "the timer fired once the loop was free")
local q = wq.queue("slow", {handler = function(key)
    local c2 = os.clock()
    while os.clock() - c2 < 1.2 do end -- line 13: a handler holds the loop
end})
q:add("k/\u{e9}")
repeat wq.sleep(0.01) until q:stats().succeeded == 1
local spun = false
wq.spawn(function()
    local c3 = os.clock()
    while os.clock() - c3 < 1.2 do end -- line 20: a spawned task holds the loop
    spun = true
end)
repeat wq.sleep(0.01) until spun
local ticked = false
wq.after(0, function()
    local c4 = os.clock()
    while os.clock() - c4 < 1.2 do end -- line 27: a timer callback holds the loop
    ticked = true
end)
repeat wq.sleep(0.01) until ticked
local r = wq.exec({"curl", "-s", "http://127.0.0.1:" .. port .. "/metrics"})
for line in r.stdout:gmatch("[^\n]+") do
    if line:find("^wqrun_loop_lag_seconds") then print(line) end
end
wq.exit(0)
