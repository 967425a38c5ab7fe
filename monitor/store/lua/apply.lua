-- The writes of one commit (monitor/store/scripts.py, Ops): ARGV[1] is a MessagePack list of
-- [name, key index, args...], KEYS the keys the indices name (all in the slot of the partition's group:
-- its own keys and the group's totals); the large values (records, early labels, outbox entries,
-- deploys) and the sketch's BITFIELD arguments follow as
-- ARGV[2..], named by their index in the ops 'setv', 'rpushv' and 'bitincr', so they are neither decoded
-- nor built here. The first op of a fenced commit is 'fence': compare-and-increment the partition's commit
-- counter, or write nothing. Sums ('hincr') are doubles written with 17 significant digits (what Python's
-- float reads back exactly), as the in-process core adds them.
local ops = cmsgpack.unpack(ARGV[1])
local CHUNK = 4000  -- arguments per unpack (Lua's C stack holds 8,000; a multiple of 4 and of 2)
for _, op in ipairs(ops) do
  local name, key = op[1], KEYS[op[2]]
  if name == 'fence' then  -- always the first op: compare-and-increment the partition's commit counter
    local stored = redis.call('HGET', key, op[3]) or ''
    if stored ~= op[4] then
      return redis.error_reply('FENCED ' .. op[3] .. ' is ' .. stored .. ', expected ' .. op[4])
    end
    redis.call('HINCRBY', key, op[3], 1)
  elseif name == 'hincr' then  -- one HMGET and one HSET per hash: a redis.call costs more than the sums
    for first = 3, #op, CHUNK do
      local last = math.min(first + CHUNK - 1, #op)
      local fields = {}
      for i = first, last, 2 do fields[#fields + 1] = op[i] end
      local held = redis.call('HMGET', key, unpack(fields))
      local writes = {}
      for j = 1, #fields do
        writes[2 * j - 1] = fields[j]
        writes[2 * j] = string.format('%.17g', (tonumber(held[j]) or 0) + tonumber(op[first + 2 * j - 1]))
      end
      redis.call('HSET', key, unpack(writes))
    end
  elseif name == 'bitincr' then  -- the sketch's u32 counters: ARGV[op[3]..op[4]] are BITFIELD's arguments
    local first, last = tonumber(op[3]), tonumber(op[4])
    for at = first, last, CHUNK do
      redis.call('BITFIELD', key, 'OVERFLOW', 'SAT', unpack(ARGV, at, math.min(at + CHUNK - 1, last)))
    end
  elseif name == 'hset' then
    for i = 3, #op, 2 do redis.call('HSET', key, op[i], op[i + 1]) end
  elseif name == 'setv' then
    redis.call('SET', key, ARGV[tonumber(op[3])], 'EX', op[4])
  elseif name == 'del' then
    redis.call('DEL', key)
  elseif name == 'zrem' then
    for i = 3, #op do redis.call('ZREM', key, op[i]) end
  elseif name == 'zadd' then  -- score, member pairs
    for i = 3, #op, 2 do redis.call('ZADD', key, op[i], op[i + 1]) end
  elseif name == 'zcut' then  -- the members scored below op[3]
    redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. op[3])
  elseif name == 'zaddn' or name == 'zremn' then
    -- a partition's deadlines: op[3] and op[4] are the hash and field counting the members (the group's
    -- sessions waiting), moved by what ZADD added or ZREM removed
    local moved = 0
    if name == 'zaddn' then
      for i = 5, #op, 2 do moved = moved + redis.call('ZADD', key, op[i], op[i + 1]) end
    else
      for i = 5, #op do moved = moved - redis.call('ZREM', key, op[i]) end
    end
    if moved ~= 0 then redis.call('HINCRBY', op[3], op[4], moved) end
  elseif name == 'expire' then
    redis.call('EXPIRE', key, op[3])
  elseif name == 'hmin' or name == 'hmax' then
    for i = 3, #op, 2 do
      local old = redis.call('HGET', key, op[i])
      local new = tonumber(op[i + 1])
      if not old or (name == 'hmin' and new < tonumber(old)) or (name == 'hmax' and new > tonumber(old)) then
        redis.call('HSET', key, op[i], op[i + 1])
      end
    end
  elseif name == 'early' then
    -- sessions whose labels wait for their impression (KEYS: the partition's zset of them, by arrival):
    -- register the new ones, then evict the oldest beyond the cap, counting their grades and sessions in
    -- the counters' fields op[7] and op[8] (monitor/core/stream/counters.py encodes them)
    local meta, prefix, counters, cap = op[3], op[4], op[5], tonumber(op[6])
    local grades_field, sessions_field = op[7], op[8]
    for i = 9, #op do
      if not redis.call('ZSCORE', key, op[i]) then
        redis.call('ZADD', key, redis.call('HINCRBY', meta, 'eseq', 1), op[i])
      end
    end
    local excess = redis.call('ZCARD', key) - cap
    if excess > 0 then
      local popped = redis.call('ZPOPMIN', key, excess)
      local sessions, grades = 0, 0
      for j = 1, #popped, 2 do
        local raw = redis.call('GET', prefix .. popped[j])
        if raw then
          sessions = sessions + 1
          local stored = cjson.decode(raw)
          if type(stored[1]) == 'table' then stored = stored[1] end  -- [grades, their ts] (early_json)
          for _ in pairs(stored) do grades = grades + 1 end
          redis.call('DEL', prefix .. popped[j])
        end
      end
      redis.call('HINCRBYFLOAT', counters, grades_field, grades)
      redis.call('HINCRBYFLOAT', counters, sessions_field, sessions)
    end
  elseif name == 'rpushv' then  -- one RPUSH of every value (in chunks)
    for first = 3, #op, CHUNK do
      local values = {}
      for i = first, math.min(first + CHUNK - 1, #op) do values[#values + 1] = ARGV[tonumber(op[i])] end
      redis.call('RPUSH', key, unpack(values))
    end
  else
    return redis.error_reply('unknown op ' .. tostring(name))
  end
end
return #ops
