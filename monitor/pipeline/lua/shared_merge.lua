-- One grading session's grades merged into a query's shared grades (KEYS[1], a hash: document -> JSON list
-- of [session, ts as text, level], the earliest first), keeping the SHARED_KEEP earliest sessions per
-- document, as monitor.core.stream.labels.merge_shared does; returns the documents whose earliest grading
-- session is now this one (the query's other sessions must read them again). ARGV: session, its
-- impression ts (Python's repr: compared as a double, kept as text so no digit is lost), the TTL, the
-- number kept, then document and level pairs.
local origin, ts, keep = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[4])
local won = {}
for i = 5, #ARGV, 2 do
  local doc, level = ARGV[i], tonumber(ARGV[i + 1])
  local raw = redis.call('HGET', KEYS[1], doc)
  local entries = {}
  if raw then
    for _, e in ipairs(cjson.decode(raw)) do
      if e[1] ~= origin then table.insert(entries, e) end
    end
  end
  table.insert(entries, {origin, ARGV[2], level})
  table.sort(entries, function(a, b)
    local ta, tb = tonumber(a[2]), tonumber(b[2])
    if ta ~= tb then return ta < tb end
    return a[1] < b[1]
  end)
  while #entries > keep do table.remove(entries) end
  if entries[1][1] == origin then table.insert(won, doc) end
  redis.call('HSET', KEYS[1], doc, cjson.encode(entries))
end
redis.call('EXPIRE', KEYS[1], ARGV[3])
return won
