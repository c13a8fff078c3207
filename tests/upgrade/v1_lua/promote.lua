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
--
-- ARGV[1] -> job key prefix ({prefix}job:); hashes of ids read from KEYS[1..2] are built from
--            it, inside the same hash tag
-- ARGV[2] -> most jobs to promote from each set in this call
-- ARGV[3] -> wake list cap
-- ARGV[4] -> now (ms) override, or '' for Redis TIME
--
-- Returns {scheduled ids, retrying ids, scheduled lateness (ms), retrying lateness (ms),
-- scheduled types, retrying types}: lateness = now - due time, and type = the job's type, one
-- entry per promoted id, in the same order.


-- Milliseconds on Redis's clock, or the caller's override (tests control time this way).
-- One clock for every host: leases and schedules compare times written by different machines.
local function now_ms(override)
  if override ~= nil and override ~= '' then
    return tonumber(override)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- The pending zset member: the zero-padded Redis sequence sorts equal priorities FIFO.
local function pending_member(seq, job_id)
  return string.format('%016d:%s', seq, job_id)
end
-- Wake one idle worker. LPUSH answers the list's length, so the cap costs a second command
-- only when it is exceeded; past the cap, extra hints would only cause empty claims. The trim
-- keeps half the cap, so a burst with no idle worker pays one LTRIM per half-cap enqueues.
local function wake_one(wake_key, wake_cap)
  if redis.call('LPUSH', wake_key, '1') > wake_cap then
    redis.call('LTRIM', wake_key, 0, math.max(1, math.floor(wake_cap / 2)) - 1)
  end
end
-- Index a job as claimable, by priority and by age, and wake one idle worker (the job hash is
-- the caller's to write). keys = {pending, pending_since, wake}. The score is formatted as %d:
-- redis.call would format a number with %.17g.
local function index_pending(keys, job_id, priority, seq, since, wake_cap)
  local score = string.format('%d', -tonumber(priority))
  redis.call('ZADD', keys[1], score, pending_member(seq, job_id))
  redis.call('ZADD', keys[2], since, job_id)
  wake_one(keys[3], wake_cap)
end
-- Make an existing job claimable. keys = {pending, pending_since, seq, wake}. keep_place: reuse
-- the job's sequence number, so a job that lost its worker goes back to its place in line
-- rather than to the back.
local function make_pending(keys, job_key, job_id, now, wake_cap, keep_place)
  local state = redis.call('HMGET', job_key, 'priority', 'seq', 'eligible_at')
  local seq = keep_place and tonumber(state[2]) or redis.call('INCR', keys[3])
  -- Back in its place, the job has been waiting since it first became claimable.
  local since = keep_place and tonumber(state[3]) or now
  index_pending({keys[1], keys[2], keys[4]}, job_id, state[1], seq, since, wake_cap)
  redis.call('HSET', job_key, 'status', 'pending', 'seq', seq, 'eligible_at', since,
    'updated_at', now)
end
-- Batch scripts (promote, recover, trim) act on whatever is due, so a repeated call (its reply
-- was lost, redis-py retried) would find nothing left and answer "nothing": the caller would
-- never log or count what the first call did. They keep their answer for 15 s (redis-py
-- retries within a second or two) under the request id and give it again to a repeat.
local function remembered_reply(reply_key)
  local saved = redis.call('GET', reply_key)
  if saved then
    return cjson.decode(saved)
  end
  return nil
end
local function remember_reply(reply_key, reply)
  redis.call('SET', reply_key, cjson.encode(reply), 'PX', 15000)
  return reply
end

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
  local state = redis.call('HMGET', job_key, 'status', 'type')
  if state[1] == entry.status then
    redis.call('HDEL', job_key, 'next_retry_at')
    make_pending(pending_keys, job_key, entry.id, now, wake_cap)
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
