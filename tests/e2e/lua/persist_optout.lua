-- persist = false queues write no rows (tests/e2e/test_persist.sh).
local mem = wq.queue("mem", {persist = false})
local disk = wq.queue("disk")
for i = 1, 5 do mem:add("m" .. i, {n = i}) end
mem:add_after("md", 60)
disk:add("d1", {n = 1})
-- a handler queue that is not persisted, run to completion
local ran = 0
local h = wq.queue("memh", {persist = false, handler = function() ran = ran + 1 end})
for i = 1, 3 do h:add("h" .. i) end
while ran < 3 do wq.sleep(0.01) end
wq.sleep(0.2) -- the inbox is polled meanwhile (test_persist.sh feeds it on the second run)
print("ran " .. ran .. " mem " .. mem:len() .. " disk " .. disk:len())
wq.exit(0)
