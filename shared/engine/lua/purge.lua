#!lua flags=allow-oom
-- purge: delete one dead job for good (DELETE /dlq/<id>).
--
-- Invariant: only a dead job is deleted, and its DLQ entry goes with its hash. A short-lived
-- tombstone lets a repeated call with the same request id succeed again instead of 404.
--
-- KEYS[1] -> {prefix}job:<id>
-- KEYS[2] -> {prefix}dead           zset, id -> time of death (ms)
-- KEYS[3] -> {prefix}purged:<id>    tombstone "<request id>|<type>": who deleted the job, and
--                                   the type a repeated call answers with
-- KEYS[4] -> {prefix}events         capped stream of the queue's events
--
-- ARGV[1] -> request_id: request id
-- ARGV[2] -> tombstone_ttl_ms: tombstone TTL (ms)
-- ARGV[3] -> events_cap: events stream cap; '0' or absent: no event
--
-- Returns {DONE, type}, {NOT_FOUND}, or {WRONG_STATE, current status}. A repeated call answers
-- as the first did (the tombstone, not the job, holds the type then: the hash is gone).
-- Event: purged, when this call deleted the job (a repeat writes none).

--- @include "codes"
--- @include "common"

local state = redis.call('HMGET', KEYS[1], 'status', 'id', 'type')
if not state[1] then
  local tombstone = redis.call('GET', KEYS[3])
  local prefix = ARGV[1] .. '|'
  if tombstone and string.sub(tombstone, 1, #prefix) == prefix then
    return {DONE, string.sub(tombstone, #prefix + 1)}
  end
  return {NOT_FOUND}
end
if state[1] ~= 'dead' then
  return {WRONG_STATE, state[1]}
end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], state[2])
redis.call('SET', KEYS[3], ARGV[1] .. '|' .. state[3], 'PX', ARGV[2])
emit(KEYS[4], ARGV[3], 'e', 'purged', 'j', state[2], 't', state[3] or '')
return {DONE, state[3]}
