-- Operating across runners (tests/e2e/test_pg_ops.sh): a worker runner of
-- queue "w" (2 workers). arg[1] is the log: "start KEY TIME NAME" when a
-- run starts and "end KEY TIME NAME OUTCOME" when it ends (wall-clock time).
-- Keys "slow*" wait 30 s (for cancels), "fail*" fail (no retries), the
-- rest take 0.2 s.
local log = assert(io.open(arg[1], "a"))
local name = arg[2] or "?"
local function note(what, key, rest)
    log:write(string.format("%s %s %.3f %s%s\n", what, key, wq.time(), name, rest and (" " .. rest) or ""))
    log:flush()
end
wq.queue("w", {
    workers = 2,
    max_retries = 0,
    handler = function(key)
        note("start", key)
        if key:match("^fail") then
            note("end", key, "failed")
            error("boom " .. key)
        end
        local ok, err = pcall(wq.sleep, key:match("^slow") and 30 or 0.2)
        note("end", key, ok and "ok" or tostring(err):gsub("%s", "_"))
        if not ok then error(err) end
    end,
})
