#!lua flags=allow-oom
-- cancel_running: end a running job canceled, once its stop was requested and its worker
-- stopped it (the handler returned or raised after the request, or SIGTERM interrupted it).
--
-- Invariant: only the holder of the job's current fencing token ends it, only while it is
-- processing and only when cancel.lua recorded a request; the job leaves `processing` and
-- enters `canceled` in the same step, never to be retried. Racing complete.lua (same token,
-- same precondition of `processing`), exactly one of the two happens. A repeated call (reply
-- lost) answers DONE again and writes nothing.
--
-- KEYS[1] -> {prefix}job:<id>
-- KEYS[2] -> {prefix}processing   zset, id -> lease deadline (ms)
-- KEYS[3] -> {prefix}canceled     zset, id -> canceled at (ms); trimmed by trim.lua
-- KEYS[4] -> {prefix}events       capped stream of the queue's events
--
-- ARGV[1] -> fencing token
-- ARGV[2] -> how it stopped, for its history: 'handler' (it returned or raised after the
--            request), 'sigterm' (interrupted)
-- ARGV[3] -> who reports it, history's actor letter: 'w' the worker
-- ARGV[4] -> TTL of the job hash (ms): retention plus a margin, as cancel.lua's
-- ARGV[5] -> now (ms) override, or '' for Redis TIME
-- ARGV[6] -> events stream cap; '0' or absent: no event
--
-- Returns {DONE, type, attempts}, {NOT_FOUND}, {STALE_TOKEN, current status} (completed
-- first, recovered, or claimed anew), or {WRONG_STATE, 'processing'} when no cancel was
-- requested.
-- History: canceled (the 'o' entry: ends the execution, with how it stopped).
-- Event: canceled, with the attempt and worker; a repeat writes none.
-- Redis commands: 7 (HMGET, TIME, ZREM, HSET, HDEL, ZADD, PEXPIRE) and one XADD with events.

--- @include "codes"
--- @include "common"

local state = redis.call('HMGET', KEYS[1], 'status', 'token', 'id', 'cancel_requested_at',
  'history', 'created_at', 'type', 'attempts', 'worker_id')
if not state[1] then
  return {NOT_FOUND}
end
if state[2] ~= ARGV[1] then
  return {STALE_TOKEN, state[1]}
end
if state[1] == 'canceled' then
  return {DONE, state[7], tonumber(state[8])}  -- a repeat: this call already ran
end
if state[1] ~= 'processing' then
  return {STALE_TOKEN, state[1]}
end
if not state[4] then
  return {WRONG_STATE, state[1]}
end

local now = now_ms(ARGV[5])
redis.call('ZREM', KEYS[2], state[3])
end_canceled({KEYS[3], KEYS[4]}, KEYS[1], state[3], now, ARGV[4],
  history_add(state[5], 'o' .. ARGV[3], state[6], now, nil, nil, ARGV[2]), ARGV[6], state[7],
  state[8], state[9])
return {DONE, state[7], tonumber(state[8])}
