-- Used by test_groups.sh. Mode "fill": adds 3 groups x 4 keys (opts.group)
-- to a queue without a handler. Mode "run": the same queue with a handler
-- and concurrency 1 per group; prints each run's key, group and the most
-- keys of one group seen running at once. Mode "serve": a service whose
-- queue derives groups with group_of (refusing keys starting with "bad").
local mode = arg[1]
if mode == "fill" then
    local q = wq.queue("hosts")
    for g = 1, 3 do
        for i = 1, 4 do
            q:add(("g%d-k%d"):format(g, i), {n = i}, {group = "group-" .. g})
        end
    end
    q:add("loner", nil, {priority = 5})
    return
end
local running, most = {}, 0
local function handler(key, payload, job)
    local g = job.group or "-"
    running[g] = (running[g] or 0) + 1
    if g ~= "-" and running[g] > most then most = running[g] end
    io.write(("ran %s %s %s\n"):format(key, g, type(payload) == "table" and payload.n or "-"))
    io.flush()
    wq.sleep(0.02)
    running[g] = running[g] - 1
end
if mode == "run" then
    local q = wq.queue("hosts", {workers = 8, group_limit = {concurrency = 1}, handler = handler})
    while q:len() > 0 or q:stats().processing > 0 do
        wq.sleep(0.01)
    end
    print("most at once in a group " .. most)
elseif mode == "serve" then
    wq.queue("hosts", {
        workers = 4,
        group_limit = {concurrency = 1},
        group_of = function(key)
            assert(not key:match("^bad"), "no group for " .. key)
            return key:match("^(%a+)")
        end,
        handler = handler,
    })
end
