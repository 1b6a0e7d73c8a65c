-- report.lua: a report built from parts, as a flow (SPEC 9). A splitter
-- lists the files of a directory and adds one part per file and a join
-- that waits for all of them (dynamic fan-out: job.flow:add from the
-- splitter's handler). Each part counts its file's lines, words and bytes
-- with `wc`; some parts fail on their first try and are retried with
-- backoff. The join runs once every part has finished, reads every part's
-- result from job.deps (in the order it was added) and writes the report.
-- A part that fails for good does not stop the report (the join is added
-- with ignore_dead): the report lists it as missing.
--
--   build/wqrun examples/report.lua [DIR] [OUT]
--
-- DIR  the files to count (recursively). Without it, a demo directory of
--      fifty generated files is created under /tmp, where one file in six
--      fails its first try on purpose and one, named broken-*, always fails.
-- OUT  where the report goes (default: DIR's report under /tmp).
--
-- With a state file the flow survives a crash: kill -9 it in the middle and
-- start it again; the parts that were done stay done and the join still
-- runs exactly once:
--   build/wqrun --db report.db examples/report.lua DIR
--   build/wqrun flows --db report.db ; build/wqrun flow show --db report.db ID
-- With PostgreSQL, several runners share the work (start this twice, with
-- the same DIR; the flow's id is made from DIR, so the second start adds
-- nothing twice):
--   build/wqrun --db postgresql://... examples/report.lua DIR &
--   build/wqrun --db postgresql://... examples/report.lua DIR

local dir, out = arg[1], arg[2]

local function run(argv)
    local r, err = wq.exec(argv)
    if not r then error(err, 2) end
    if r.status ~= 0 then error((r.stderr:gsub("%s+$", "")), 2) end
    return r.stdout
end

if not dir then -- a demo directory
    dir = run({"mktemp", "-d", "/tmp/wqrun-report.XXXXXX"}):gsub("%s+$", "")
    for i = 1, 50 do
        local name = (i == 13 and "broken-" or i % 6 == 0 and "flaky-" or "file-") .. i .. ".txt"
        local f = assert(io.open(dir .. "/" .. name, "w"))
        for line = 1, i * 3 do
            f:write(("line %d of file %d: the quick brown fox\n"):format(line, i))
        end
        f:close()
    end
    wq.log("report: a demo directory of 50 files in %s", dir)
end
out = out or (dir:gsub("/+$", "") .. ".report.txt")

-- The parts: one file each. A flaky file fails its first try; a broken one always fails.
local tried = {}
local parts = wq.queue("report_parts", {
    workers = 4,
    max_retries = 3,
    limiter = wq.limiter.exponential(0.05, 1),
    handler = function(path, payload, job)
        local name = path:match("[^/]+$")
        if name:match("^broken%-") then
            error("cannot read " .. name .. ": simulated disk error", 0)
        end
        if name:match("^flaky%-") and not tried[path] then
            tried[path] = true
            error("simulated timeout on the first try", 0)
        end
        local l, w, c = run({"wc", "-l", "-w", "-c", path}):match("(%d+)%s+(%d+)%s+(%d+)")
        return {file = name, lines = tonumber(l), words = tonumber(w), bytes = tonumber(c),
                attempt = job.attempt}
    end,
})

-- The join: every part has finished (done or dead); their results are in job.deps.
local joins = wq.queue("report_join", {handler = function(_, payload, job)
    local lines, words, bytes, missing, rows = 0, 0, 0, {}, {}
    for _, d in ipairs(job.deps) do
        if d.state == "done" then
            local r = d.result
            lines, words, bytes = lines + r.lines, words + r.words, bytes + r.bytes
            rows[#rows + 1] = ("%-24s %7d %7d %9d%s"):format(r.file, r.lines, r.words, r.bytes,
                r.attempt > 1 and ("  (attempt %d)"):format(r.attempt) or "")
        else
            missing[#missing + 1] = ("%s: %s"):format(d.key, d.error)
        end
    end
    local f = assert(io.open(payload.out, "w"))
    f:write(("report of %s: %d files, %d missing\n\n"):format(payload.dir, #job.deps, #missing))
    f:write(("%-24s %7s %7s %9s\n"):format("FILE", "LINES", "WORDS", "BYTES"))
    f:write(table.concat(rows, "\n"), "\n")
    f:write(("%-24s %7d %7d %9d\n"):format("total", lines, words, bytes))
    if #missing > 0 then
        f:write("\nmissing:\n  ", table.concat(missing, "\n  "), "\n")
    end
    f:close()
    wq.log("report: %d files, %d lines, %d missing: written to %s", #job.deps - #missing, lines,
        #missing, payload.out)
    return {files = #job.deps, missing = #missing, lines = lines}
end})

-- The splitter: lists the files, then appends the parts and the join to its own flow.
local split = wq.queue("report_split", {handler = function(_, payload, job)
    local files = {}
    for path in run({"find", payload.dir, "-type", "f", "-name", "*.txt"}):gmatch("[^\n]+") do
        files[#files + 1] = path
    end
    table.sort(files)
    local handles = {}
    for i, path in ipairs(files) do
        handles[i] = job.flow:add(parts, path)
    end
    -- ignore_dead: the report is written even when some parts failed for good
    job.flow:add(joins, "report:" .. payload.dir, payload, {after = handles, ignore_dead = true})
    job.flow:commit() -- a retried splitter appends nothing twice
    wq.log("report: %d parts added", #files)
end})

-- One flow per directory: its id names it, so a second start adds nothing twice.
local id = "report:" .. dir
wq.flow{id = id, nodes = {{queue = split, key = "split:" .. dir, payload = {dir = dir, out = out}}}}
