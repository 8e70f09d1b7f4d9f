"""The Redis stores' Lua scripts: each read and write of a session, atomic on the server.

Kept apart from :mod:`guardrail.stores._redis` (the stores' Python) so each
reads as one thing. Every script takes the session's four keys (its hash,
its records hash, its versions set, its mark) and answers in one round trip.
"""

from __future__ import annotations

# Lua numbers are doubles: versions (microseconds since 1970, about 2**51) stay exact, and
# string.format('%d') writes them back without the exponent tostring() would use.
_HELPERS = """
local function number(value, what)
  local n = tonumber(value)
  if value and not n then
    return redis.error_reply('guardrail: ' .. what .. ' of ' .. KEYS[1] .. ' is not a number')
  end
  return n
end
local function hmget(key, names)
  local out = {}
  for i = 1, #names, 1000 do
    local part = redis.call('HMGET', key, unpack(names, i, math.min(i + 999, #names)))
    for j = 1, #part do out[#out + 1] = part[j] end
  end
  return out
end
-- KEYS[4], the session's mark: 'deleted' (by a delete or an expiry, for a while) or 'lost'
-- (Redis lost writes it acknowledged: set by the first reader or writer that noticed).
local function lost()
  redis.call('SET', KEYS[4], 'lost')
  return {'0', 'lost'}
end
-- A session gone that a reader or writer had (at version `had`): deleted if marked so, or
-- with a ttl (Redis drops expired keys unmarked); else its writes were lost.
local function gone(had, ttl, mark)
  if had > 0 and mark ~= 'deleted' and ttl == 0 then return lost() end
  return nil
end
local function refresh(ttl)
  if ttl > 0 then
    for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ttl) end
  end
end
"""

# KEYS: session hash, records hash, versions zset, mark.
# ARGV: base version, ttl in ms (0: none), meta JSON ('' for none), the number P of pruned
# names, the change's own base (a retry's base is later), the P names (rows deleted unless
# written after the change's base), then name, record pairs.
# Returns {version, 1 if no one else wrote since base else 0} when written, {'0', 'deleted'}
# when the session base names was deleted since, {'0', 'lost'} when Redis lost writes of it
# (it is behind base, or gone unmarked), or {held version, {name, held row, ...}}
# when rows at stake were written after base (the meta's name: '').
APPLY = (
    _HELPERS
    + """
local s, r, z = KEYS[1], KEYS[2], KEYS[3]
local base = tonumber(ARGV[1])
local meta = ARGV[3]
local first = 6 + tonumber(ARGV[4])  -- the first record name
local own_base = tonumber(ARGV[5])
local held = redis.call('HMGET', s, 'version', 'meta_version', 'created')
local version = number(held[1], 'version')
if type(version) == 'table' then return version end
local mark = redis.call('GET', KEYS[4])
if mark == 'lost' then return {'0', 'lost'} end
if base > 0 then
  -- The writer read a session: gone, or started again since, it was deleted after the read.
  if not version then return gone(base, tonumber(ARGV[2]), mark) or {'0', 'deleted'} end
  local created = number(held[3] or 'none', 'created')
  if type(created) == 'table' then return created end
  if created >= base then return {'0', 'deleted'} end
  -- The same life of the session, at a version below what the writer read: writes are lost.
  if version < base then return lost() end
end
if version and version > base then
  local stake = {}
  for i = first, #ARGV, 2 do
    local at = redis.call('ZSCORE', z, ARGV[i])
    if at and tonumber(at) > base then
      stake[#stake + 1] = ARGV[i]
      stake[#stake + 1] = redis.call('HGET', r, ARGV[i])
    end
  end
  if meta ~= '' and held[2] and tonumber(held[2]) > base then
    stake[#stake + 1] = ''
    stake[#stake + 1] = redis.call('HGET', s, 'meta')
  end
  if #stake > 0 then return {held[1], stake} end
end
local time = redis.call('TIME')
local now = string.format('%d', time[1] * 1000000 + time[2])
local fields = {'written', now}
local new
local alone = 1
if version then
  if version ~= base then alone = 0 end
  new = string.format('%d', version + 1)
else
  new = now
  fields[#fields + 1] = 'created'
  fields[#fields + 1] = string.format('%d', tonumber(now) - 1)
  if mark then redis.call('DEL', KEYS[4]) end  -- started again: the delete mark has served
end
fields[#fields + 1] = 'version'
fields[#fields + 1] = new
if meta ~= '' then
  fields[#fields + 1] = 'meta'
  fields[#fields + 1] = meta
  fields[#fields + 1] = 'meta_version'
  fields[#fields + 1] = new
end
for i = 6, first - 1 do
  local at = redis.call('ZSCORE', z, ARGV[i])
  if at and tonumber(at) <= own_base then
    redis.call('HDEL', r, ARGV[i])
    redis.call('ZREM', z, ARGV[i])
  end
end
for i = first, #ARGV, 2000 do
  local rows, scores = {}, {}
  for j = i, math.min(i + 1998, #ARGV - 1), 2 do
    rows[#rows + 1] = ARGV[j]
    rows[#rows + 1] = ARGV[j + 1]
    scores[#scores + 1] = new
    scores[#scores + 1] = ARGV[j]
  end
  redis.call('HSET', r, unpack(rows))
  redis.call('ZADD', z, unpack(scores))
end
redis.call('HSET', s, unpack(fields))
refresh(tonumber(ARGV[2]))
return {new, alone}
"""
)

# KEYS as above. ARGV: the version the reader holds (0: none), ttl in ms.
# Returns {'0'} for a missing session, {'0', 'lost'} for one whose writes Redis lost, {version}
# when still at that version, else {version, complete (1 or 0), meta or nil, {record, ...}}.
CHANGES = (
    _HELPERS
    + """
local s, r, z = KEYS[1], KEYS[2], KEYS[3]
local held = redis.call('HMGET', s, 'version', 'created', 'meta', 'meta_version')
local since = tonumber(ARGV[1])
local mark = redis.call('GET', KEYS[4])
if mark == 'lost' then return {'0', 'lost'} end
if not held[1] then return gone(since, tonumber(ARGV[2]), mark) or {'0'} end
local version = number(held[1], 'version')
if type(version) == 'table' then return version end
refresh(tonumber(ARGV[2]))
if version == since then return {held[1]} end
local created = number(held[2] or 'none', 'created')
if type(created) == 'table' then return created end
-- The same life of the session, at a version below what the reader had: writes are lost.
if version < since and created < since then return lost() end
local complete = created >= since
local rows
if complete then
  -- Both are written by every write: a records hash that is gone or short is damage.
  if redis.call('HLEN', r) ~= redis.call('ZCARD', z) then
    return redis.error_reply('guardrail: the records of ' .. KEYS[1] .. ' are missing')
  end
  rows = redis.call('HVALS', r)
else
  rows = hmget(r, redis.call('ZRANGEBYSCORE', z, '(' .. ARGV[1], '+inf'))
end
local meta = false
if held[3] and (complete or (tonumber(held[4]) or 0) > since) then meta = held[3] end
return {held[1], complete and 1 or 0, meta, rows}
"""
)

# KEYS as above. ARGV: seconds of idleness, how long a delete mark is kept (ms). Deletes the
# session if no one wrote it since, and marks it deleted.
EXPIRE = """
local written = tonumber(redis.call('HGET', KEYS[1], 'written'))
if not written then return 0 end
local time = redis.call('TIME')
if time[1] * 1000000 + time[2] - written < tonumber(ARGV[1]) * 1000000 then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('SET', KEYS[4], 'deleted', 'PX', ARGV[2])
return 1
"""

# KEYS as above. ARGV: how long the delete mark is kept (ms). Deletes the session (a lost
# one too: the operator starts it over) and marks it deleted.
DELETE = """
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('SET', KEYS[4], 'deleted', 'PX', ARGV[1])
return 1
"""
