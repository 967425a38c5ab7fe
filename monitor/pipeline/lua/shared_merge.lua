-- Grading sessions' grades merged into a query's shared grades (KEYS[1], a hash: document -> MessagePack
-- list of [session, ts as text, level], the earliest first; a JSON list, as stored before, is read too), keeping the SHARED_KEEP earliest sessions per
-- document, as monitor.core.stream.labels.merge_shared does, one session after the other in the order
-- given (a batch's writes to one query in one call); returns, per session, the documents whose earliest
-- grading session is now that one (the query's other sessions must read them again). ARGV: the TTL, the
-- number kept, then per session: the session, its impression ts (Python's repr: compared as a double, kept
-- as text so no digit is lost), how many documents, then its document and level pairs.
local ttl, keep = ARGV[1], tonumber(ARGV[2])
local out = {}
local i = 3
while i <= #ARGV do
  local origin, ts, count = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local won = {}
  for j = i + 3, i + 2 + 2 * count, 2 do
    local doc, level = ARGV[j], tonumber(ARGV[j + 1])
    local raw = redis.call('HGET', KEYS[1], doc)
    local entries = {}
    if raw then
      local stored = (string.byte(raw, 1) == 91) and cjson.decode(raw) or cmsgpack.unpack(raw)  -- 91: '['
      for _, e in ipairs(stored) do
        if e[1] ~= origin then table.insert(entries, e) end
      end
    end
    table.insert(entries, {origin, ts, level})
    table.sort(entries, function(a, b)
      local ta, tb = tonumber(a[2]), tonumber(b[2])
      if ta ~= tb then return ta < tb end
      return a[1] < b[1]
    end)
    while #entries > keep do table.remove(entries) end
    if entries[1][1] == origin then table.insert(won, doc) end
    redis.call('HSET', KEYS[1], doc, cmsgpack.pack(entries))
  end
  table.insert(out, won)
  i = i + 3 + 2 * count
end
redis.call('EXPIRE', KEYS[1], ttl)
return out
