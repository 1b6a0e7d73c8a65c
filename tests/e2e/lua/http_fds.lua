-- Runs out of file descriptors on purpose: holds all but two of them for
-- 2.5 s while a job needs wq.exec (three pipes) and clients connect over
-- HTTP; then gives them back. The job must wait, not fail.
local q = wq.queue("jobs", {max_retries = 0, handler = function(key)
    local r, err = wq.exec({"true"})
    if not r then
        error(err)
    end
    print("exec ok " .. key)
    io.flush()
end})
local files = {}
while true do
    local f = io.open("/dev/null")
    if not f then
        break
    end
    files[#files + 1] = f
end
for _ = 1, 2 do
    table.remove(files):close()
end
print("hogging " .. #files)
io.flush()
q:add("during")
wq.sleep(2.5)
for _, f in ipairs(files) do
    f:close()
end
files = nil
collectgarbage()
print("released")
io.flush()
repeat
    wq.sleep(0.05)
until q:stats().succeeded + q:stats().dead >= 1
print("succeeded " .. q:stats().succeeded .. " dead " .. q:stats().dead)
io.flush()
