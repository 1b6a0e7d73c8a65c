-- bench/pg: prints "<key> <wall-clock start>" as each job of queue "lat" starts.
io.stdout:setvbuf("line")
wq.queue("lat", {workers = 24, handler = function(key)
    io.stdout:write(key, " ", string.format("%.6f", wq.time()), "\n")
end})
