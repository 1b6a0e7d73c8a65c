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
-- What it shows: a handler queue with workers, max_retries, a limiter and a
-- per-job timeout; wq.exec with cwd and a timeout; the handler outcome rules
-- (an error is a failure, retried through the limiter); q:num_requeues;
-- q:stats() and q:dead() after the run. On a terminal, wqrun draws a live
-- progress line while it runs.

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

local results = {} -- rel -> {size=, gz=, sha=, attempts=}
local sums = {}    -- rel -> the line sha256sum printed for it

local q
q = wq.queue("files", {
    workers = 4,
    max_retries = 3, -- 1 run + up to 3 retries
    limiter = wq.limiter.exponential(0.1, 2), -- 0.1, 0.2, 0.4 s ... at most 2 s
    timeout = 60, -- seconds per attempt, tools included
    handler = function(rel)
        local attempt = q:num_requeues(rel) + 1
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
        sums[rel] = line
        results[rel] = {size = file_size(dir .. "/" .. rel) or 0, gz = #gz,
                        sha = line:match("^\\?(%x+)"), attempts = attempt}
    end,
})

local t0 = wq.now()
for _, rel in ipairs(files) do q:add(rel) end

-- Wait until nothing is queued, running or waiting for a retry.
repeat
    wq.sleep(0.05)
    local s = q:stats()
until s.queued + s.processing + s.waiting == 0
local elapsed = wq.now() - t0

-- ---- report ----

local function human(n)
    if n >= 1024 * 1024 then return ("%.1f MiB"):format(n / 1024 / 1024) end
    if n >= 1024 then return ("%.1f KiB"):format(n / 1024) end
    return n .. " B"
end

local shown, total_in, total_out, retried = 0, 0, 0, 0
print(("%-28s %10s %10s %6s %3s  %s"):format("file", "size", "gzip", "ratio", "try", "sha256"))
for _, rel in ipairs(files) do
    local r = results[rel]
    if r then
        total_in, total_out = total_in + r.size, total_out + r.gz
        if r.attempts > 1 then retried = retried + 1 end
        shown = shown + 1
        if shown <= 40 then
            local name = rel:gsub("%c", "?")
            if #name > 28 then name = "..." .. name:sub(-25) end
            print(("%-28s %10s %10s %5.1f%% %3d  %s"):format(name, human(r.size), human(r.gz),
                r.size > 0 and 100 * r.gz / r.size or 100, r.attempts, r.sha:sub(1, 16)))
        end
    end
end
if shown > 40 then print(("... and %d more"):format(shown - 40)) end

-- The manifest, in sha256sum's format, sorted by name.
local manifest = {}
for _, rel in ipairs(files) do
    if sums[rel] then manifest[#manifest + 1] = sums[rel] end
end
write_file(outdir .. "/SHA256SUMS", table.concat(manifest))

local s = q:stats()
print(("%d files, %s -> %s (%.1f%%) in %.2fs; %d needed a retry (%d failed runs); %d failed")
    :format(shown, human(total_in), human(total_out),
            total_in > 0 and 100 * total_out / total_in or 100, elapsed, retried, s.failures,
            s.dead))
for _, d in ipairs(q:dead()) do
    print(("  FAILED %s after %d attempts: %s"):format(d.key:gsub("%c", "?"), d.attempts, d.error))
end
print(("output: %s (check: cd %s && sha256sum -c %s/SHA256SUMS)"):format(outdir, dir, outdir))
if s.dead > 0 then wq.exit(1) end
