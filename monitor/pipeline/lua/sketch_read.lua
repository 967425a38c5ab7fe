-- The count-min sketch cells an impression without query_bucket is estimated from: KEYS are one partition's
-- sketch slices (cms:<index>), ARGV the cell fields ("<row>:<column>") of the batch's queries that need an
-- estimate. Returns, slice after slice, each field's count (false where the cell is empty): one command in
-- place of one HMGET per slice, so the client packs the fields once. Read only.
local out = {}
for i = 1, #KEYS do
  for first = 1, #ARGV, 4000 do  -- unpack in chunks: Lua's stack takes a few thousand values at most
    local values = redis.call('HMGET', KEYS[i], unpack(ARGV, first, math.min(first + 3999, #ARGV)))
    for j = 1, #values do out[#out + 1] = values[j] end
  end
end
return out
