-- Grading sessions' grades merged into a query's shared grades (KEYS[1], a hash: document -> MessagePack
-- list of [session, ts as text, level], the earliest first; a JSON list, as stored before, is read too),
-- keeping the SHARED_KEEP earliest sessions per document, as monitor.core.stream.held_grades.merge_shared does,
-- one session after the other in the order given (a batch's writes to one query in one call); returns, per
-- session, the documents whose earliest grading session is now that one (the query's other sessions must
-- read them again). ARGV: the TTL, the number kept, then per session: the session, its impression ts
-- (Python's repr: compared as a double, kept as text so no digit is lost), how many documents, then its
-- document and level pairs. A document whose kept sessions are all earlier than this one (and not it) is
-- left as it is: no write.
--
-- Every document the call names is read with one HMGET and every changed one written with one HSET (a
-- redis.call costs more than the merge itself: one HGET and one HSET per document made this script a
-- quarter of Redis's CPU in the realistic world, benchmarks/stream.py).
local ttl, keep = ARGV[1], tonumber(ARGV[2])
local CHUNK = 4000  -- arguments per unpack (Lua's C stack holds 8,000)
local function before(t1, o1, t2, o2)  -- (ts, session) order: earlier ts first, then the session id
  if t1 ~= t2 then return t1 < t2 end
  return o1 < o2
end
-- the documents named, each once
local docs, slot = {}, {}
local i = 3
while i <= #ARGV do
  local count = tonumber(ARGV[i + 2])
  for j = i + 3, i + 2 + 2 * count, 2 do
    if not slot[ARGV[j]] then table.insert(docs, ARGV[j]); slot[ARGV[j]] = #docs end
  end
  i = i + 3 + 2 * count
end
local raw = {}
for first = 1, #docs, CHUNK do
  local got = redis.call('HMGET', KEYS[1], unpack(docs, first, math.min(first + CHUNK - 1, #docs)))
  for k = 1, #got do raw[first + k - 1] = got[k] end
end
local held, dirty = {}, {}  -- document -> its entries as now merged; the documents changed
local function entries_of(doc)
  local at = slot[doc]
  if held[at] == nil then
    local stored = raw[at]
    if stored then
      held[at] = (string.byte(stored, 1) == 91) and cjson.decode(stored) or cmsgpack.unpack(stored)  -- '['
    else
      held[at] = {}
    end
  end
  return held[at]
end
local out = {}
i = 3
while i <= #ARGV do
  local origin, ts, count = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local tsn = tonumber(ts)
  local won = {}
  for j = i + 3, i + 2 + 2 * count, 2 do
    local doc, level = ARGV[j], tonumber(ARGV[j + 1])
    local entries = {}  -- the others, earliest first
    for _, e in ipairs(entries_of(doc)) do
      if e[1] ~= origin then table.insert(entries, e) end
    end
    local at = #entries + 1  -- where this session goes
    for k = 1, #entries do
      if before(tsn, origin, tonumber(entries[k][2]), entries[k][1]) then at = k; break end
    end
    if at <= keep then  -- else the kept sessions are all earlier: the document is left as it is
      table.insert(entries, at, {origin, ts, level})
      while #entries > keep do table.remove(entries) end
      if at == 1 then table.insert(won, doc) end
      held[slot[doc]] = entries
      dirty[slot[doc]] = true
    end
  end
  table.insert(out, won)
  i = i + 3 + 2 * count
end
local writes = {}
for at = 1, #docs do
  if dirty[at] then table.insert(writes, docs[at]); table.insert(writes, cmsgpack.pack(held[at])) end
end
for first = 1, #writes, CHUNK do
  redis.call('HSET', KEYS[1], unpack(writes, first, math.min(first + CHUNK - 1, #writes)))
end
redis.call('EXPIRE', KEYS[1], ttl)
return out
