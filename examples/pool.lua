-- Jobs in another language on long-lived processes (SPEC 10.1,
-- docs/workers.md): a pool of 4 workers runs a queue's jobs, each answering
-- one JSON line per job, without a process per job.
--
--   build/wqrun examples/pool.lua [python|node|bash] [JOBS]
--
-- Runs JOBS (default 200) texts through the worker (default python:
-- examples/pool_python.py; node: pool_node.js; bash: pool_shell.sh). Every
-- tenth job fails on its first attempt and is retried after the worker's
-- retry_in; job 7 is refused for good (a dead letter, so the run exits 3).
-- Then one direct pool:call, and a summary.
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local kind = arg[1] or "python"
local njobs = tonumber(arg[2] or "200")
local argv = ({
    python = {"python3", here .. "pool_python.py"},
    node = {"node", here .. "pool_node.js"},
    bash = {"bash", here .. "pool_shell.sh"},
})[kind]
assert(argv, "usage: pool.lua [python|node|bash] [JOBS]")

local pool = assert(wq.pool(argv, {size = 4, timeout = 10}))
local texts = {
    "the quick brown fox", "jumps over the lazy dog", "lorem ipsum dolor sit amet",
    "a pool of long-lived workers", "one JSON line per job",
}
local q = wq.queue("texts", {
    handler = pool,       -- each job runs on a free process of the pool
    max_retries = 3,
    keep_done = 3600,     -- keeps each result for q:item(key)
})
for i = 1, njobs do
    q:add(string.format("text-%03d", i), {
        text = texts[i % #texts + 1] .. " #" .. i,
        fail_until = (i % 10 == 0) and 2 or nil, -- fails once, then succeeds
        bad = (i == 7) or nil,                   -- refused for good
    })
end

local t0 = wq.now()
wq.wait_idle()
local elapsed = wq.now() - t0
local st = q:stats()
local words, workers = 0, {}
for i = 1, njobs do
    local item = q:item(string.format("text-%03d", i))
    if item and item.state == "done" and item.result then
        words = words + (item.result.words or 0)
        workers[item.result.worker] = true
    end
end
-- A pool serves direct calls too (any JSON in, the reply out):
local reply, err = pool:call({queue = "direct", key = "hello", attempt = 1,
    payload = {text = "called directly"}})
print(string.format("%s pool: %d jobs in %.2f s: %d succeeded, %d failed runs (retried), %d dead",
    kind, njobs, elapsed, st.succeeded, st.failures, st.dead))
if kind ~= "bash" then print(string.format("words counted: %d", words)) end
for k in pairs(workers) do print("answered by: " .. k) end
print("direct call: " .. (reply and require("cjson").encode(reply) or err))
for _, d in ipairs(q:dead()) do print(string.format("dead: %s: %s", d.key, d.error)) end
local ps = pool:stats()
print(string.format("processes started: %d (size %d)", ps.started, ps.size))
