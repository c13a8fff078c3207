#!lua flags=allow-oom
-- promote: make due scheduled and retrying jobs claimable (the one deferred path).
--
-- Invariant: a job leaves `scheduled`/`retrying` only into `pending`, and only once it is due.
-- Due jobs from both sets are promoted in (due time, job id) order, so jobs due at the same
-- moment enter the queue in job-id order. Two
-- schedulers running this at once promote each job once: the ZREM and the move are one step.
--
-- KEYS[1] -> {prefix}scheduled       zset, id -> scheduled_at (ms)
-- KEYS[2] -> {prefix}retrying        zset, id -> next_retry_at (ms)
-- KEYS[3] -> {prefix}pending         zset, score -priority, member <seq>:<id>
-- KEYS[4] -> {prefix}pending_since   zset, id -> claimable since (ms)
-- KEYS[5] -> {prefix}seq             FIFO counter
-- KEYS[6] -> {prefix}wake            capped list of wake-up hints
-- KEYS[7] -> {prefix}reply:<request>  this call's answer, kept 15 s for a repeated call
-- KEYS[8] -> {prefix}events          capped stream of the queue's events
--
-- ARGV[1] -> job_prefix: job key prefix ({prefix}job:); hashes of ids read from KEYS[1..2] are built from
--            it, inside the same hash tag
-- ARGV[2] -> limit: most jobs to promote from each set in this call
-- ARGV[3] -> wake_cap: wake list cap
-- ARGV[4] -> now_ms: now (ms) override, or '' for Redis TIME
-- ARGV[5] -> events_cap: events stream cap; '0' or absent: no event
--
-- Returns {scheduled ids, retrying ids, scheduled lateness (ms), retrying lateness (ms),
-- scheduled types, retrying types}: lateness = now - due time, and type = the job's type, one
-- entry per promoted id, in the same order.
-- History: promoted (scheduler), with the job's attempts so far, in make_pending's HSET.
-- Event: promoted, one per job (an XADD each; a repeated call, answered from KEYS[7], none).

--- @include "codes"
--- @include "common"

local saved = remembered_reply(KEYS[7])
if saved then
  return saved
end
local prefix, limit, wake_cap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms(ARGV[4])
local pending_keys = {KEYS[3], KEYS[4], KEYS[5], KEYS[6]}

-- Both sets are one deferred path: gather what is due in each, then promote in one order,
-- (due time, job id), so a retry due earlier is never queued behind a later scheduled job.
local due = {}
for _, source in ipairs({{KEYS[1], 'scheduled'}, {KEYS[2], 'retrying'}}) do
  local entries = redis.call('ZRANGEBYSCORE', source[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0,
    limit)
  for i = 1, #entries, 2 do
    due[#due + 1] = {id = entries[i], at = tonumber(entries[i + 1]), index = source[1],
      status = source[2]}
  end
end
table.sort(due, function(a, b)
  if a.at ~= b.at then
    return a.at < b.at
  end
  return a.id < b.id
end)

local promoted = {scheduled = {{}, {}, {}}, retrying = {{}, {}, {}}}
for _, entry in ipairs(due) do
  local job_key = prefix .. entry.id
  redis.call('ZREM', entry.index, entry.id)
  local state = redis.call('HMGET', job_key, 'status', 'type', 'attempts', 'history',
    'created_at')
  if state[1] == entry.status then
    redis.call('HDEL', job_key, 'next_retry_at')
    make_pending(pending_keys, job_key, entry.id, now, wake_cap, false,
      history_add(state[4], 'ps', state[5], now, state[3]))
    emit(KEYS[8], ARGV[5], 'e', 'promoted', 'j', entry.id, 't', state[2] or '')
    local out = promoted[entry.status]
    out[1][#out[1] + 1] = entry.id
    out[2][#out[2] + 1] = now - entry.at
    out[3][#out[3] + 1] = state[2]
  end
end
local reply = {promoted.scheduled[1], promoted.retrying[1], promoted.scheduled[2],
  promoted.retrying[2], promoted.scheduled[3], promoted.retrying[3]}
if #due > 0 then
  remember_reply(KEYS[7], reply)
end
return reply
