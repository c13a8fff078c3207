#!lua flags=allow-oom
-- purge: delete one dead job for good (DELETE /dlq/<id>).
--
-- Invariant: only a dead job is deleted, and its DLQ entry goes with its hash. A short-lived
-- tombstone lets a repeated call with the same request id succeed again instead of 404.
--
-- KEYS[1] -> {prefix}job:<id>
-- KEYS[2] -> {prefix}dead           zset, id -> time of death (ms)
-- KEYS[3] -> {prefix}purged:<id>    tombstone: the request id that deleted the job
--
-- ARGV[1] -> request id
-- ARGV[2] -> tombstone TTL (ms)
--
-- Returns {DONE}, {NOT_FOUND}, or {WRONG_STATE, current status}.

--- @include "codes"

local state = redis.call('HMGET', KEYS[1], 'status', 'id')
if not state[1] then
  if redis.call('GET', KEYS[3]) == ARGV[1] then
    return {DONE}
  end
  return {NOT_FOUND}
end
if state[1] ~= 'dead' then
  return {WRONG_STATE, state[1]}
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], state[2])
redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
return {DONE}
