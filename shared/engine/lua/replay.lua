#!lua flags=allow-oom
-- replay: give a dead job a fresh start (an operator's explicit decision).
--
-- Invariant: only a dead job is replayed; it leaves the DLQ and becomes pending with attempts
-- and recoveries at 0, its error, traceback, result and timings cleared, its original
-- priority kept and its hash no longer expiring. A repeated call with the same request id
-- returns the job again.
--
-- KEYS[1] -> {prefix}job:<id>
-- KEYS[2] -> {prefix}dead            zset, id -> time of death (ms)
-- KEYS[3] -> {prefix}pending         zset, score -priority, member <seq>:<id>
-- KEYS[4] -> {prefix}pending_since   zset, id -> claimable since (ms)
-- KEYS[5] -> {prefix}seq             FIFO counter
-- KEYS[6] -> {prefix}wake            capped list of wake-up hints
-- KEYS[7] -> {prefix}events          capped stream of the queue's events
--
-- ARGV[1] -> request_id: request id
-- ARGV[2] -> wake_cap: wake list cap
-- ARGV[3] -> now_ms: now (ms) override, or '' for Redis TIME
-- ARGV[4] -> events_cap: events stream cap; '0' or absent: no event
--
-- Returns {DONE, HGETALL of the job}, {NOT_FOUND}, or {WRONG_STATE, current status}.
-- History: replayed (api), attempt 0; the history before it is kept.
-- Event: replayed; a repeat writes none.

--- @include "codes"
--- @include "common"

local state = redis.call('HMGET', KEYS[1], 'status', 'id', 'last_request', 'history',
  'created_at', 'type')
if not state[1] then
  return {NOT_FOUND}
end
if state[1] ~= 'dead' then
  if state[3] == ARGV[1] then
    return {DONE, redis.call('HGETALL', KEYS[1])}
  end
  return {WRONG_STATE, state[1]}
end

local now = now_ms(ARGV[3])
redis.call('ZREM', KEYS[2], state[2])
redis.call('PERSIST', KEYS[1])
redis.call('HSET', KEYS[1], 'attempts', 0, 'recoveries', 0, 'last_request', ARGV[1])
redis.call('HDEL', KEYS[1], 'last_error', 'traceback', 'result', 'started_at', 'finished_at',
  'next_retry_at', 'worker_id')
make_pending({KEYS[3], KEYS[4], KEYS[5], KEYS[6]}, KEYS[1], state[2], now, tonumber(ARGV[2]),
  false, history_add(state[4], 'ya', state[5], now, 0))
emit(KEYS[7], ARGV[4], 'e', 'replayed', 'j', state[2], 't', state[6] or '')
return {DONE, redis.call('HGETALL', KEYS[1])}
