-- One query annotation's grades merged into the query's judgments (KEYS[1]: document -> level) and their ts
-- (KEYS[2]: document -> ts, for grades that came with one), as monitor.core.stream.held_grades.merge_grades does:
-- a grade with ts replaces the held one unless the held ts is later (a tie: this one, delivered later);
-- a grade without ts always replaces it and leaves the held ts. Returns the documents whose grade won (only
-- those are fanned out). ARGV: the ts (Python's repr, or '' for none), the TTL, then document and level
-- pairs. Idempotent under redelivery: the same grade again ties with itself.
local ts, ttl = ARGV[1], ARGV[2]
local won = {}
for i = 3, #ARGV, 2 do
  local doc = ARGV[i]
  local held = (ts ~= '') and redis.call('HGET', KEYS[2], doc) or false
  if not held or tonumber(held) <= tonumber(ts) then
    redis.call('HSET', KEYS[1], doc, ARGV[i + 1])
    if ts ~= '' then redis.call('HSET', KEYS[2], doc, ts) end
    table.insert(won, doc)
  end
end
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[2], ttl)
return won
