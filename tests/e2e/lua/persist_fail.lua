-- Failure counts continue across runs until dead (tests/e2e/test_persist.sh).
--   persist_fail.lua 1      add "f"; the handler always fails; exit at the 3rd attempt
--   persist_fail.lua 2      the handler always fails; runs until "f" is dead
--   persist_fail.lua 3      no handler: list q:dead(), retry_dead("f")
local mode = arg[1]
local attempts = 0
local q
local opts = {max_retries = 3, limiter = wq.limiter.exponential(0.01, 0.05)}
if mode ~= "3" then
    opts.handler = function(key, p)
        attempts = attempts + 1
        print(string.format("attempt %s %d requeues=%d id=%s", key, attempts,
            q:num_requeues(key), tostring(p and p.id)))
        io.stdout:flush()
        if mode == "1" and attempts == 3 then
            wq.exit(0)
        end
        error("boom: always fails", 0)
    end
end
q = wq.queue("fail", opts)
if mode == "1" then
    q:add("f", {id = 7})
elseif mode == "2" then
    print("restored requeues=" .. q:num_requeues("f"))
elseif mode == "3" then
    for _, d in ipairs(q:dead()) do
        print(string.format("dead %s attempts=%d error=%s id=%s", d.key, d.attempts, d.error,
            tostring(d.payload and d.payload.id)))
    end
    print("retry " .. tostring(q:retry_dead("f")))
    print("retry-again " .. tostring(q:retry_dead("f")))
    print("after len=" .. q:len() .. " requeues=" .. q:num_requeues("f") .. " dead=" .. #q:dead())
end
