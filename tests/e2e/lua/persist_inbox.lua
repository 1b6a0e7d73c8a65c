-- Inbox consumption (tests/e2e/test_persist.sh): a handler on queue "inq"
-- prints each key, its payload and wq.time() when it runs.
wq.queue("inq", {handler = function(key, p)
    local shown = p
    if type(p) == "table" then shown = p.n and ("n=" .. tostring(p.n)) or "table" end
    print(string.format("got %s %s %.4f", key, tostring(shown), wq.time()))
    io.stdout:flush()
end})
print(string.format("start %.4f", wq.time()))
io.stdout:flush()
