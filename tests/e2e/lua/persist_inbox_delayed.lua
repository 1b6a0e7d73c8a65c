-- A consumer started after `wqrun add --after`: the delayed inbox row is
-- waited for like any delayed item, then handled.
local q = wq.queue("jobs", {handler = function(key, payload)
    print(("ran %s %d %.3f"):format(key, payload.a, wq.time()))
end})
