-- Grading sessions' grades merged into a query's shared grades (KEYS[1], a hash: document -> MessagePack
-- list of [session, ts as text, level], the earliest first; a JSON list, as stored before, is read too),
-- keeping the SHARED_KEEP earliest sessions per document, as monitor.core.stream.labels.merge_shared does,
-- one session after the other in the order given (a batch's writes to one query in one call); returns, per
-- session, the documents whose earliest grading session is now that one (the query's other sessions must
-- read them again). ARGV: the TTL, the number kept, then per session: the session, its impression ts
-- (Python's repr: compared as a double, kept as text so no digit is lost), how many documents, then its
-- document and level pairs. A document whose kept sessions are all earlier than this one (and not it) is
-- left as it is: no write.
local ttl, keep = ARGV[1], tonumber(ARGV[2])
local out = {}
local i = 3
local function before(t1, o1, t2, o2)  -- (ts, session) order: earlier ts first, then the session id
  if t1 ~= t2 then return t1 < t2 end
  return o1 < o2
end
while i <= #ARGV do
  local origin, ts, count = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local tsn = tonumber(ts)
  local won = {}
  for j = i + 3, i + 2 + 2 * count, 2 do
    local doc, level = ARGV[j], tonumber(ARGV[j + 1])
    local raw = redis.call('HGET', KEYS[1], doc)
    local entries = {}  -- the others, earliest first
    if raw then
      local stored = (string.byte(raw, 1) == 91) and cjson.decode(raw) or cmsgpack.unpack(raw)  -- 91: '['
      for _, e in ipairs(stored) do
        if e[1] ~= origin then table.insert(entries, e) end
      end
    end
    local at = #entries + 1  -- where this session goes
    for k = 1, #entries do
      if before(tsn, origin, tonumber(entries[k][2]), entries[k][1]) then at = k; break end
    end
    if at <= keep then  -- else the kept sessions are all earlier: the document is left as it is
      table.insert(entries, at, {origin, ts, level})
      while #entries > keep do table.remove(entries) end
      if at == 1 then table.insert(won, doc) end
      redis.call('HSET', KEYS[1], doc, cmsgpack.pack(entries))
    end
  end
  table.insert(out, won)
  i = i + 3 + 2 * count
end
redis.call('EXPIRE', KEYS[1], ttl)
return out
