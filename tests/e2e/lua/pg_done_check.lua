-- keep_done across runners (tests/e2e/test_pg_done.sh): a one-shot runner
-- without handlers that reads what the workers' runs left behind. Prints
-- "info KEY BY" from q:done_info(KEY) (or "info KEY none"), "add KEY BOOL"
-- for a plain add, "force KEY BOOL" for a forced one, "forget KEY BOOL".
local q = wq.queue("kd", {keep_done = 3600})
local function info(key)
    local i = q:done_info(key)
    print("info", key, i and i.result and i.result.by or "none", i and type(i.finished_at) or "-")
end
for _, cmd in ipairs(arg) do
    local what, key = cmd:match("^(%a+):(.*)$")
    if what == "info" then info(key)
    elseif what == "add" then print("add", key, q:add(key))
    elseif what == "force" then print("force", key, q:add(key, nil, {force = true}))
    elseif what == "forget" then print("forget", key, q:forget_done(key))
    end
end
