-- JSON helper for tests/e2e/test_http.sh, run with lua5.4 (not with wqrun).
-- Reads one JSON document on stdin and prints one "path value" line per leaf,
-- sorted, values as compact JSON (so 3 and 3.0 both print as 3):
--   lua5.4 http_json.lua           {"a":{"b":[1,"x"]}}  ->  a.b.1 1 / a.b.2 "x"
--   lua5.4 http_json.lua queues    a GET /queues array, keyed by name:
--                                  held.depth 3 / held.adds 3 / ...
--   lua5.4 http_json.lua lines     JSON lines; prints each document's leaves
--                                  prefixed by its line number
--   lua5.4 http_json.lua record Q KEY [ATTEMPT]
--                                  JSON lines written by http_api.lua: the leaves
--                                  of the first record of queue Q and KEY (and
--                                  attempt); exits 1 when there is none
--   lua5.4 http_json.lua order Q   the keys queue Q ran, in run order, comma-separated
--   lua5.4 http_json.lua error     exits 0 when the document is exactly
--                                  {"error": "<non-empty string>"}, and prints it
-- Exits 1 when the input is not valid JSON (or, for queues, not an array of
-- objects with a string name).
local cjson = require "cjson"

local function leaf(v)
  if type(v) == "number" and v == math.floor(v) and math.abs(v) < 2 ^ 53 then
    return string.format("%d", v)
  end
  return cjson.encode(v)
end

local function flatten(prefix, v, out)
  if type(v) == "table" then
    local n = 0
    for k, x in pairs(v) do
      n = n + 1
      flatten(prefix == "" and tostring(k) or prefix .. "." .. tostring(k), x, out)
    end
    if n == 0 then out[#out + 1] = prefix .. " {}" end
  else
    out[#out + 1] = prefix .. " " .. leaf(v)
  end
end

local function decode(text)
  local ok, v = pcall(cjson.decode, text)
  if not ok then
    io.stderr:write("http_json.lua: not JSON: ", tostring(v), "\n")
    os.exit(1)
  end
  return v
end

local mode = arg[1] or "flat"
local out = {}
if mode == "record" then
  local q, key, attempt = arg[2], arg[3], tonumber(arg[4])
  for line in io.lines() do
    local r = decode(line)
    if r.q == q and r.key == key and (not attempt or r.attempt == attempt) then
      flatten("", r, out)
      break
    end
  end
  if #out == 0 then os.exit(1) end
elseif mode == "order" then
  local runs = {}
  for line in io.lines() do
    local r = decode(line)
    if r.q == arg[2] then runs[#runs + 1] = r end
  end
  table.sort(runs, function(a, b) return a.seq < b.seq end)
  local keys = {}
  for i, r in ipairs(runs) do keys[i] = r.key end
  print(table.concat(keys, ","))
  os.exit(0)
elseif mode == "lines" then
  local i = 0
  for line in io.lines() do
    i = i + 1
    flatten(tostring(i), decode(line), out)
  end
else
  local doc = decode(io.read("a"))
  if mode == "error" then
    local n = 0
    for _ in pairs(type(doc) == "table" and doc or {}) do n = n + 1 end
    if n ~= 1 or type(doc.error) ~= "string" or doc.error == "" then os.exit(1) end
    print(doc.error)
    os.exit(0)
  elseif mode == "queues" then
    if type(doc) ~= "table" then os.exit(1) end
    for _, q in ipairs(doc) do
      if type(q) ~= "table" or type(q.name) ~= "string" then os.exit(1) end
      flatten(q.name, q, out)
    end
  else
    flatten("", doc, out)
  end
end
table.sort(out)
for _, l in ipairs(out) do print(l) end
