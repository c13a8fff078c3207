#!lua flags=allow-oom
-- cancel: withdraw a job that has not started (pending, scheduled or retrying), or record a
-- request to stop a running one.
--
-- Invariant: a canceled job is in no claimable or deferred index, so no worker can start it.
-- A processing job is not touched beyond the request (cancel_requested_at, _by, and its
-- history): it stays processing under its lease until its worker's supervisor stops it and
-- cancel_running.lua (or fail.lua, or a lost worker's release or recovery) ends it canceled;
-- a completion that arrives first wins. Canceling a canceled job, or asking again to stop a
-- running one, succeeds and changes nothing (so a repeated call is harmless); completed and
-- dead jobs are refused with their status.
--
-- KEYS[1] -> {prefix}job:<id>
-- KEYS[2] -> {prefix}pending         zset, score -priority, member <seq>:<id>
-- KEYS[3] -> {prefix}pending_since   zset, id -> claimable since (ms)
-- KEYS[4] -> {prefix}scheduled       zset, id -> scheduled_at (ms)
-- KEYS[5] -> {prefix}retrying        zset, id -> next_retry_at (ms)
-- KEYS[6] -> {prefix}canceled        zset, id -> canceled at (ms); trimmed by trim.lua
-- KEYS[7] -> {prefix}held            zset, pending jobs a type's limit holds back
-- KEYS[8] -> {prefix}held_order      zset, the held jobs in claim order (for listings)
-- KEYS[9] -> {prefix}events          capped stream of the queue's events
--
-- ARGV[1] -> hash_ttl_ms: TTL of the job hash (ms): retention plus a margin, a backstop behind trim.lua
-- ARGV[2] -> now_ms: now (ms) override, or '' for Redis TIME
-- ARGV[3] -> request_id: request id: a repeat of the call that canceled the job answers DONE again
-- ARGV[4] -> requester: who asks (a running job's request keeps it): at most 64 bytes, no '|' nor line
--            break (the caller cleans it), or '' for nobody named
-- ARGV[5] -> events_cap: events stream cap; '0' or absent: no event
--
-- Returns {DONE, HGETALL of the job} (canceled, or for a processing job the request recorded),
-- {DUPLICATE, HGETALL} when it was already canceled or its stop already requested,
-- {NOT_FOUND}, or {WRONG_STATE, current status}.
-- History: canceled (api), with the job's attempts so far; for a running job
-- cancel_requested (api), with who asked.
-- Event: canceled, or cancel_requested (with the worker running it); a repeat, or a job
-- already canceled or asked to stop, writes none.
-- Redis commands: 3 to record a stop request without events (HMGET, TIME, HSET) and the
-- HGETALL of the reply; one XADD more with events.
-- A pending job a limit holds is not in KEYS[2] (the ZREM answers 0): it leaves KEYS[7..8].

--- @include "codes"
--- @include "common"

local state = redis.call('HMGET', KEYS[1], 'status', 'id', 'seq', 'last_request', 'attempts',
  'history', 'created_at', 'type', 'cancel_requested_at', 'worker_id', 'priority')
local status, job_id = state[1], state[2]
if not status then
  return {NOT_FOUND}
end
if status == 'canceled' or (status == 'processing' and state[9]) then
  return {state[4] == ARGV[3] and DONE or DUPLICATE, redis.call('HGETALL', KEYS[1])}
end
if status == 'processing' then
  local now = now_ms(ARGV[2])
  local by = ARGV[4] ~= '' and ARGV[4] or nil
  redis.call('HSET', KEYS[1], 'cancel_requested_at', now, 'cancel_requested_by', ARGV[4],
    'updated_at', now, 'last_request', ARGV[3], 'history', history_add(state[6], 'na',
    state[7], now, nil, nil, by))
  emit(KEYS[9], ARGV[5], 'e', 'cancel_requested', 'j', job_id, 't', state[8] or '',
    'w', state[10] or '')
  return {DONE, redis.call('HGETALL', KEYS[1])}
end
if status == 'pending' then
  local member = pending_member(tonumber(state[3]), job_id)
  if redis.call('ZREM', KEYS[2], member) == 0 then
    redis.call('ZREM', KEYS[7], held_member(state[8] or '',
      string.format('%d', -tonumber(state[11] or 0)), member))
    redis.call('ZREM', KEYS[8], member)
  end
  redis.call('ZREM', KEYS[3], job_id)
elseif status == 'scheduled' then
  redis.call('ZREM', KEYS[4], job_id)
elseif status == 'retrying' then
  redis.call('ZREM', KEYS[5], job_id)
else
  return {WRONG_STATE, status}
end

local now = now_ms(ARGV[2])
redis.call('HSET', KEYS[1], 'status', 'canceled', 'finished_at', now, 'updated_at', now,
  'last_request', ARGV[3], 'history', history_add(state[6], 'ka', state[7], now,
  state[5]))
redis.call('HDEL', KEYS[1], 'seq', 'next_retry_at')
redis.call('ZADD', KEYS[6], now, job_id)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
emit(KEYS[9], ARGV[5], 'e', 'canceled', 'j', job_id, 't', state[8] or '')
return {DONE, redis.call('HGETALL', KEYS[1])}
