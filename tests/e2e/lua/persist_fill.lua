-- Fills queue "big" with arg[1] items of 2000-byte payloads, 100 per commit
-- window (tests/e2e/test_persist.sh: a full disk mid-run).
local q = wq.queue("big")
local pad = string.rep("x", 2000)
for i = 1, tonumber(arg[1]) do
    q:add(string.format("k%06d", i), pad)
    if i % 100 == 0 then
        wq.sleep(0.01)
    end
end
print("all added")
