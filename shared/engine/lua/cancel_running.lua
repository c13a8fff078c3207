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
-- KEYS[4] -> {prefix}running      zset, jobs holding a limit slot (given back here)
-- KEYS[5] -> {prefix}held         zset, pending jobs a type's limit holds back
-- KEYS[6] -> {prefix}held_order   zset, the held jobs in claim order (for listings)
-- KEYS[7] -> {prefix}pending      zset, score -priority, member <seq>:<id> (a held job returns)
-- KEYS[8] -> {prefix}wake         capped list of wake-up hints
-- KEYS[9] -> {prefix}events       capped stream of the queue's events
--
-- ARGV[1] -> token: fencing token
-- ARGV[2] -> stopped: how it stopped, for its history: 'handler' (it returned or raised after the
--            request), 'sigterm' (interrupted)
-- ARGV[3] -> actor: who reports it, history's actor letter: 'w' the worker
-- ARGV[4] -> hash_ttl_ms: TTL of the job hash (ms): retention plus a margin, as cancel.lua's
-- ARGV[5] -> now_ms: now (ms) override, or '' for Redis TIME
-- ARGV[6] -> wake_cap: wake-up hint cap (a held job the freed limit slot lets go is hinted)
-- ARGV[7] -> events_cap: events stream cap; '0' or absent: no event
--
-- Returns {DONE, type, attempts}, {NOT_FOUND}, {STALE_TOKEN, current status} (completed
-- first, recovered, or claimed anew), or {WRONG_STATE, 'processing'} when no cancel was
-- requested.
-- History: canceled (the 'o' entry: ends the execution, with how it stopped).
-- Event: canceled, with the attempt and worker; a repeat writes none.
-- Redis commands: 7 (HMGET, TIME, ZREM, HSET, HDEL, ZADD, PEXPIRE) and one XADD with events;
-- a job holding a limit slot gives it back (includes/common.lua release_slot).

--- @include "codes"
--- @include "common"

local state = redis.call('HMGET', KEYS[1], 'status', 'token', 'id', 'cancel_requested_at',
  'history', 'created_at', 'type', 'attempts', 'worker_id', 'slot')
local refused = token_refusal(state, ARGV[1])
if refused then
  return refused
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
if state[10] == state[2] then
  limited({running = KEYS[4], held = KEYS[5], order = KEYS[6], pending = KEYS[7],
    wake = KEYS[8]}):release_slot(state[3], state[7], tonumber(ARGV[6]), true)
end
end_canceled({KEYS[3], KEYS[9]}, KEYS[1], state[3], now, ARGV[4],
  history_add(state[5], 'o' .. ARGV[3], state[6], now, nil, nil, ARGV[2]), ARGV[7], state[7],
  state[8], state[9])
return {DONE, state[7], tonumber(state[8])}
