#!lua
-- complete: record a job's success and its result.
--
-- Invariant: only the worker holding the current fencing token completes a processing job;
-- the job leaves `processing` and enters `completed` in the same step. A repeated call with the
-- same token (reply lost, retried) answers DONE again and changes nothing more.
--
-- KEYS[1] -> {prefix}job:<id>
-- KEYS[2] -> {prefix}processing   zset, id -> lease deadline (ms)
-- KEYS[3] -> {prefix}completed    zset, id -> finished_at (ms); trimmed by trim.lua
--
-- ARGV[1] -> fencing token
-- ARGV[2] -> result (JSON text)
-- ARGV[3] -> TTL of the job hash (ms): retention plus a margin, a backstop behind trim.lua
-- ARGV[4] -> now (ms) override, or '' for Redis TIME
--
-- Returns {DONE}, {NOT_FOUND}, or {STALE_TOKEN, current status}.

--- @include "codes"
--- @include "common"

local state = redis.call('HMGET', KEYS[1], 'status', 'token', 'id')
if not state[1] then
  return {NOT_FOUND}
end
if state[2] ~= ARGV[1] then
  return {STALE_TOKEN, state[1]}
end
if state[1] == 'completed' then
  return {DONE}
end
if state[1] ~= 'processing' then
  return {STALE_TOKEN, state[1]}
end

local now = now_ms(ARGV[4])
redis.call('HSET', KEYS[1], 'status', 'completed', 'result', ARGV[2], 'finished_at', now,
  'updated_at', now)
redis.call('ZREM', KEYS[2], state[3])
redis.call('ZADD', KEYS[3], now, state[3])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {DONE}
