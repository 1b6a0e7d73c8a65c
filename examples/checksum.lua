-- checksum.lua: a real batch job. Every file of a directory becomes one job;
-- four workers run the standard tools `sha256sum` and `gzip` on it through
-- wq.exec (no shell), write FILE.gz into an output directory, and retry a
-- failed file with exponential backoff before giving up on it (dead letter).
-- At the end it prints a table, writes a manifest OUTDIR/SHA256SUMS in
-- sha256sum's own format, and exits 1 if any file could not be processed.
--
--   build/wqrun examples/checksum.lua [DIR] [OUTDIR]
--
-- DIR     the directory to process (recursively). Without it, a demo
--         directory of a few dozen generated files (text from `seq`, binary
--         from `head -c N /dev/urandom`) is created under /tmp, and about
--         one first attempt in eight fails on purpose to show retries
--         (CHECKSUM_FLAKY=0 turns that off, CHECKSUM_FLAKY=0.5 makes it worse).
-- OUTDIR  where FILE.gz and SHA256SUMS go (created if missing; default: a
--         new directory under /tmp). Check the result with
--         (cd DIR && sha256sum -c OUTDIR/SHA256SUMS)
-- Directories it creates under /tmp are left for you to look at (and delete).
--
-- Resuming: with a state file, an interrupted run (Ctrl-C, kill -9, a
-- reboot) picks up where it stopped, and a run over the same files does not
-- redo the ones already finished (keep_done remembers them, with their
-- results, for 30 days):
--   build/wqrun --db checksum.db examples/checksum.lua DIR OUTDIR
-- Ctrl-C still writes the table and the manifest of what was finished.
--
-- What it shows: a handler queue with workers, max_retries, a limiter and a
-- per-job timeout; wq.exec with cwd and a timeout; the handler outcome rules
-- (an error is a failure, retried through the limiter); the job table
-- (job.attempt); keep_done with handler results and q:done_info; a report
-- written by wq.on_shutdown on Ctrl-C; q:stats() and q:dead() after the
-- run. On a terminal, wqrun draws a live progress line while it runs.

local dir, outdir = arg[1], arg[2]

-- Runs a program and returns its stdout; raises (a job failure inside a
-- handler) with the program's own error message when it does not succeed.
local function run(argv, opts)
    local r, err = wq.exec(argv, opts)
    if not r then error(err, 2) end -- the program could not be started
    if r.timeout then error(argv[1] .. ": timed out", 2) end
    if r.status ~= 0 then
        local msg = r.stderr:gsub("%s+$", "")
        if msg == "" then msg = "exit status " .. tostring(r.status or ("signal " .. r.signal)) end
        error(msg, 2)
    end
    return r.stdout
end

local function write_file(path, data)
    local f = assert(io.open(path, "wb"))
    assert(f:write(data))
    assert(f:close())
end

local function file_size(path)
    local f = io.open(path, "rb")
    if not f then return nil end
    local n = f:seek("end")
    f:close()
    return n
end

-- ---- the input: the given directory, or a generated demo directory ----

local flaky = tonumber(os.getenv("CHECKSUM_FLAKY") or "")
if not dir then
    dir = run({"mktemp", "-d", "/tmp/wqrun-checksum-in.XXXXXX"}):gsub("\n$", "")
    for i = 1, 36 do
        if i % 3 == 0 then -- incompressible
            write_file(string.format("%s/blob-%02d.bin", dir, i),
                       run({"head", "-c", tostring(i * 37 * 1024), "/dev/urandom"}))
        else -- text, compresses well
            write_file(string.format("%s/numbers-%02d.txt", dir, i),
                       run({"seq", "-w", "1", tostring(i * 4000)}))
        end
    end
    flaky = flaky or 0.125
    print(("demo input: %s (36 generated files)"):format(dir))
end
flaky = flaky or 0
dir = run({"realpath", "-e", "--", dir}):gsub("\n$", "")

if not outdir then
    outdir = run({"mktemp", "-d", "/tmp/wqrun-checksum-out.XXXXXX"}):gsub("\n$", "")
end
run({"mkdir", "-p", "--", outdir})
outdir = run({"realpath", "-e", "--", outdir}):gsub("\n$", "")
if outdir == dir then error("OUTDIR must differ from DIR", 0) end

-- Every regular file, as a path relative to dir (NUL-separated: any name works).
local files = {}
for rel in run({"find", ".", "-type", "f", "-printf", "%P\\0"}, {cwd = dir}):gmatch("([^\0]+)\0") do
    -- Skip what an earlier run into an OUTDIR inside DIR produced.
    if not (dir .. "/" .. rel):find(outdir .. "/", 1, true) then files[#files + 1] = rel end
end
table.sort(files)
if #files == 0 then
    print("no files in " .. dir)
    return
end

-- ---- the job ----

-- A job's result (what its handler returns) is kept with keep_done:
-- {size=, gz=, line=, attempts=}, line being what sha256sum printed.
local q = wq.queue("files", {
    workers = 4,
    max_retries = 3, -- 1 run + up to 3 retries
    limiter = wq.limiter.exponential(0.1, 2), -- 0.1, 0.2, 0.4 s ... at most 2 s
    timeout = 60, -- seconds per attempt, tools included
    keep_done = 30 * 86400, -- a file done within 30 days is not done again
    handler = function(rel, _, job)
        local attempt = job.attempt
        if flaky > 0 and attempt == 1 and math.random() < flaky then
            error("simulated transient failure (CHECKSUM_FLAKY)")
        end
        -- sha256sum in dir with the relative name prints a manifest line.
        local line = run({"sha256sum", "--", rel}, {cwd = dir, timeout = 30})
        local gz = run({"gzip", "-c", "-n", "--", rel}, {cwd = dir, timeout = 30})
        local out = outdir .. "/" .. rel .. ".gz"
        if rel:find("/", 1, true) then
            run({"mkdir", "-p", "--", (out:gsub("/[^/]*$", ""))})
        end
        write_file(out, gz)
        return {size = file_size(dir .. "/" .. rel) or 0, gz = #gz, line = line, attempts = attempt}
    end,
})

local t0 = wq.now()
local skipped = 0
for _, rel in ipairs(files) do
    if not q:add(rel) then skipped = skipped + 1 end -- finished by an earlier run
end
if skipped > 0 then print(("%d files were finished by an earlier run"):format(skipped)) end

-- ---- report ----

local function human(n)
    if n >= 1024 * 1024 then return ("%.1f MiB"):format(n / 1024 / 1024) end
    if n >= 1024 then return ("%.1f KiB"):format(n / 1024) end
    return n .. " B"
end

-- OUTDIR/SHA256SUMS: the lines of the files done so far, sorted by name.
local function write_manifest()
    local manifest = {}
    for _, rel in ipairs(files) do
        local info = q:done_info(rel)
        if info and info.result then manifest[#manifest + 1] = info.result.line end
    end
    write_file(outdir .. "/SHA256SUMS", table.concat(manifest))
end

local reported = false
local function report(why)
    if reported then return q:stats().dead end
    reported = true
    local elapsed = wq.now() - t0
    if why then print(why) end
    local shown, total_in, total_out, retried = 0, 0, 0, 0
    print(("%-28s %10s %10s %6s %3s  %s"):format("file", "size", "gzip", "ratio", "try", "sha256"))
    for _, rel in ipairs(files) do
        local info = q:done_info(rel)
        local r = info and info.result
        if r then
            total_in, total_out = total_in + r.size, total_out + r.gz
            if r.attempts > 1 then retried = retried + 1 end
            shown = shown + 1
            if shown <= 40 then
                local name = rel:gsub("%c", "?")
                if #name > 28 then name = "..." .. name:sub(-25) end
                print(("%-28s %10s %10s %5.1f%% %3d  %s"):format(name, human(r.size), human(r.gz),
                    r.size > 0 and 100 * r.gz / r.size or 100, r.attempts,
                    r.line:match("^\\?(%x+)"):sub(1, 16)))
            end
        end
    end
    if shown > 40 then print(("... and %d more"):format(shown - 40)) end
    write_manifest()

    local s = q:stats()
    print(("%d files, %s -> %s (%.1f%%) in %.2fs; %d needed a retry (%d failed runs); %d failed")
        :format(shown, human(total_in), human(total_out),
                total_in > 0 and 100 * total_out / total_in or 100, elapsed, retried, s.failures,
                s.dead))
    for _, d in ipairs(q:dead()) do
        print(("  FAILED %s after %d attempts: %s"):format(d.key:gsub("%c", "?"), d.attempts, d.error))
    end
    print(("output: %s (check: cd %s && sha256sum -c %s/SHA256SUMS)"):format(outdir, dir, outdir))
    return s.dead
end

-- Ctrl-C (or SIGTERM): the running files finish, then the report covers
-- what is done; the rest stays queued in the state file for the next run.
-- The manifest is written at once too, in case --grace ends the wait.
wq.on_shutdown(function()
    write_manifest()
    while q:stats().processing > 0 do wq.sleep(0.05) end
    report("interrupted: the report covers the files finished so far")
end)

-- Wait until nothing is queued, running or waiting for a retry.
q:wait_idle()
if report() > 0 then wq.exit(1) end
