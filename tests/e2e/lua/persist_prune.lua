-- Expired done rows leave the state file (tests/e2e/test_jobs_persist.sh):
-- 3,000 keys run on a queue with keep_done = 1; once their memories have
-- expired and been pruned (the store then sweeps the done table, a slice
-- per commit), one more key runs and stays remembered.
local n = tonumber(arg[1]) or 3000
local q = wq.queue("prune", {keep_done = 1, handler = function(key)
    if key == "with-result" then return {ok = true} end
end})
for i = 1, n do q:add("k" .. i) end
q:add("with-result")
repeat wq.sleep(0.01) until q:stats().succeeded == n + 1
print(("re-add k1 at once: %s"):format(tostring(q:add("k1"))))
wq.sleep(3)
print(("k1 remembered after 3 s: %s"):format(tostring(q:done_info("k1") ~= nil)))
q:add("fresh")
repeat wq.sleep(0.01) until q:stats().succeeded == n + 2
print("prune done")
