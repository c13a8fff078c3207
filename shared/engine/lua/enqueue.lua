#!lua
-- enqueue: create a job in one queue, pending now or scheduled for later (at a time or after a
-- delay), at most once per job id.
--
-- Invariant: a new job is in exactly one index (pending or scheduled). Repeating the same call
-- (redis-py retries a command whose reply was lost) creates nothing new: the job id is the
-- caller's, so a second run finds the job and answers as the first did. A client's own id
-- (version 8, shared/model/job_ids.py) comes with the digest of its request: a repeat with
-- the same digest finds the job, one with another digest is refused (CONFLICT) and changes
-- nothing, so an id names one request's job for as long as the job exists. Idempotency keys span
-- queues, so they live in the global slot: reserve.lua claims one for a job id first, then this
-- script creates that job (shared/engine/scripts/, Scripts.enqueue).
--
-- KEYS[1] -> {ns:queue}:v2:job:<id>        the new job's hash
-- KEYS[2] -> {ns:queue}:v2:pending         zset, score -priority, member <seq>:<id>
-- KEYS[3] -> {ns:queue}:v2:pending_since   zset, id -> claimable since (ms)
-- KEYS[4] -> {ns:queue}:v2:seq             FIFO counter
-- KEYS[5] -> {ns:queue}:v2:wake            capped list of wake-up hints
-- KEYS[6] -> {ns:queue}:v2:scheduled       zset, id -> scheduled_at (ms)
-- KEYS[7] -> {ns:queue}:v2:events          capped stream of the queue's events
--
-- ARGV[1] -> job_id: job id (UUIDv4, chosen by the caller)
-- ARGV[2] -> type: type
-- ARGV[3] -> payload: payload (JSON text)
-- ARGV[4] -> priority: priority (integer)
-- ARGV[5] -> max_retries: max_retries (maximum number of executions)
-- ARGV[6] -> scheduled_at_ms: scheduled_at (ms, the client's clock) or ''
-- ARGV[7] -> delay_ms: delay (ms, 0 or more) or '': scheduled_at is now + delay, on this script's clock
--            (never given with ARGV[6])
-- ARGV[8] -> timeout: timeout (seconds) or ''
-- ARGV[9] -> wake_cap: wake list cap
-- ARGV[10] -> now_ms: now (ms) override, or '' for Redis's clock (TIME, or the event's entry id)
-- ARGV[11] -> traceparent: optional: W3C traceparent of the enqueue span, stored as field `traceparent`
--             (absent or '' when tracing is off: nothing is stored)
-- ARGV[12] -> events_cap: events stream cap; '0' or absent: no event
-- ARGV[13] -> actor: optional: who enqueues, as a history actor code ('s': a periodic schedule's tick,
--             workerd/periodic.py); absent or '': the api. Given only with ARGV[12] ('0' when off)
-- ARGV[14] -> digest: optional: a client-chosen id's request digest, stored as field `digest` and
--             compared on a repeat (absent or '': no comparison). Given only with ARGV[13]
--
-- Returns {CONFLICT, id}: ARGV[14] was given and the job exists with another digest (nothing
--         written), else {DONE, id, status, created_at, existed[, first]}: existed is 1 when the job was already
--         there (a repeat of this call, or of the request an idempotency key names), else 0. A
--         delayed job's scheduled_at is created_at + delay (EnqueueRequest.scheduled_at_for).
--         first (a new job only) is 1 when the queue's FIFO counter was absent (or, for a
--         pending job, 0: only scheduled jobs came before): its first job since its keys were
--         made or deleted, so the caller lists the queue (again).
-- History and event: enqueued or scheduled (api), the job's first entry, in the one HSET; a
-- repeat writes neither.
-- Time: with events on, the event's entry id (common.lua, stamped), except with an absolute
-- scheduled_at, whose comparison with now names the event: that path reads TIME first.
-- Redis commands for a new pending job: 7 with events on (HMGET, XADD, INCR, ZADD, ZADD, LPUSH,
-- HSET; an LTRIM more once per half-cap enqueues while no worker takes the hints); 7 with events
-- off (TIME in the XADD's place). A delayed job: HMGET, XADD, SET NX, ZADD, HSET (the SET tells a
-- queue's first job); with an absolute scheduled_at a TIME more.

--- @include "codes"
--- @include "common"

local job_key, job_id = KEYS[1], ARGV[1]
local digest = ARGV[14] ~= '' and ARGV[14] or nil

local prior = redis.call('HMGET', job_key, 'status', 'created_at', 'digest')
if prior[1] then
  if digest and prior[3] ~= digest then
    return {CONFLICT, job_id}
  end
  return {DONE, job_id, prior[1], tonumber(prior[2]), 1}
end

-- The state first, then the event that names it, then the time. Without an absolute
-- scheduled_at the state needs no clock: a delay above 0 is always in the future. With one it
-- is a comparison with now, so that path reads Redis TIME before its event; the others take
-- now from their event's entry id when events are on (common.lua, stamped: no TIME command).
-- The event is written only here, after the repeat check above: a refused or repeated call
-- writes nothing.
local at = ARGV[6] ~= '' and tonumber(ARGV[6]) or nil
local now = at and now_ms(ARGV[10]) or nil
local status
if at then
  status = at > now and 'scheduled' or 'pending'
else
  status = (ARGV[7] ~= '' and tonumber(ARGV[7]) > 0) and 'scheduled' or 'pending'
end
local event = status == 'scheduled' and 'scheduled' or 'enqueued'
if now then
  emit(KEYS[7], ARGV[12], 'e', event, 'j', job_id, 't', ARGV[2])
else
  now = stamped(ARGV[10], KEYS[7], ARGV[12], 'e', event, 'j', job_id, 't', ARGV[2])
end
-- Numbers are formatted once, as %d: redis.call formats a Lua number with %.17g on each use.
local stamp = string.format('%d', now)
-- A delay becomes an absolute scheduled_at here, on Redis's clock, so a producer's skewed
-- clock cannot move the job; from then on it is stored and promoted like any scheduled_at.
local due = ARGV[6]
if ARGV[7] ~= '' then
  due = string.format('%d', now + tonumber(ARGV[7]))
end
local scheduled_at = due ~= '' and tonumber(due) or nil
-- History's first entry, a constant: enqueued (or scheduled) by the api at created_at, attempt 0,
-- unless the caller names another actor.
local first = status == 'scheduled' and 'sa0|0' or 'qa0|0'
if ARGV[13] and ARGV[13] ~= '' then
  first = string.sub(first, 1, 1) .. ARGV[13] .. '0|0'
end
-- The fields every transition reads or writes come first: Redis keeps a small hash as a list
-- and looks each field up in order.
local fields = {'status', status, 'token', '0', 'attempts', '0', 'updated_at', stamp,
  'history', first, 'id', job_id, 'type', ARGV[2], 'payload', ARGV[3], 'priority', ARGV[4],
  'max_retries', ARGV[5], 'recoveries', '0', 'created_at', stamp}
local function add(name, value)
  fields[#fields + 1] = name
  fields[#fields + 1] = value
end
if ARGV[8] ~= '' then
  add('timeout', ARGV[8])
end
if ARGV[11] and ARGV[11] ~= '' then
  add('traceparent', ARGV[11])
end
if scheduled_at then
  add('scheduled_at', due)
end
if digest then
  add('digest', digest)
end
-- The FIFO counter also tells a queue's first job since its keys were made (or deleted,
-- delete_queue.lua): absent, and the caller lists the queue again (shared.read.directory). A
-- scheduled job sets it to 0 only then, so the next INCR still gives 1, as without it.
local first
if status == 'scheduled' then
  first = redis.call('SET', KEYS[4], '0', 'NX') ~= false
  redis.call('ZADD', KEYS[6], due, job_id)
else
  local seq = redis.call('INCR', KEYS[4])
  first = seq == 1
  add('seq', string.format('%d', seq))
  add('eligible_at', stamp)
  index_pending({KEYS[2], KEYS[3], KEYS[5]}, job_id, ARGV[4], seq, stamp, tonumber(ARGV[9]))
end
-- The whole hash in one write: every field this job starts with.
redis.call('HSET', job_key, unpack(fields))

return {DONE, job_id, status, now, 0, first and 1 or 0}
