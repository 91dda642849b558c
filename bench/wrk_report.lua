-- wrk script: per-response Server-Timing (time inside Django) next to wrk's latency.
-- Prints one line: WRK {json}.
times = {}  -- globals: thread:get() reads only globals
bad = 0
response = function(status, headers, body)
  local st = headers["Server-Timing"] or headers["server-timing"]
  if st then
    local d = st:match("dur=([%d%.]+)")
    if d then times[#times + 1] = tonumber(d) end
  end
  if status ~= 200 then bad = bad + 1 end
end
local threads = {}
setup = function(thread) table.insert(threads, thread) end
done = function(summary, latency, requests)
  local all = {}
  local nbad = 0
  for _, t in ipairs(threads) do
    for _, v in ipairs(t:get("times")) do all[#all + 1] = v end
    nbad = nbad + t:get("bad")
  end
  table.sort(all)
  local function pct(p)
    if #all == 0 then return -1 end
    return all[math.max(1, math.ceil(#all * p))]
  end
  io.write(string.format(
    'WRK {"requests":%d,"rps":%.1f,"lat_p50_ms":%.1f,"lat_p95_ms":%.1f,"srv_p50_ms":%.1f,"srv_p95_ms":%.1f,"non200":%d}\n',
    summary.requests, summary.requests / summary.duration * 1e6, latency:percentile(50) / 1000,
    latency:percentile(95) / 1000, pct(0.5), pct(0.95), nbad))
end
