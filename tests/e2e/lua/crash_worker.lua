-- Used by scripts/crash-test.sh: logs every key it runs to arg[1] (one
-- write per line) after a short random sleep, so several items are in
-- flight whenever the runner is killed. arg[2] == "keep_done": finished
-- keys are remembered (a second add of one is skipped).
local log = assert(io.open(arg[1], "a"))
log:setvbuf("line")
math.randomseed(os.time() + math.floor(wq.now() * 1000))
wq.queue("crash", {
    workers = 8,
    keep_done = arg[2] == "keep_done" and 3600 or nil,
    handler = function(key)
        wq.sleep(math.random() * 0.03)
        log:write(key, "\n")
    end,
})
