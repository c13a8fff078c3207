#!lua
-- enqueue: create a job, pending now or scheduled for later, at most once per job id and
-- at most once per idempotency key.
--
-- Invariant: a new job is in exactly one index (pending or scheduled). Repeating the same call
-- (redis-py retries a command whose reply was lost) creates nothing new: the job id is the
-- caller's, so a second run finds the job and answers as the first did.
--
-- KEYS[1] -> {prefix}job:<id>          the new job's hash
-- KEYS[2] -> {prefix}pending           zset, score -priority, member <seq>:<id>
-- KEYS[3] -> {prefix}pending_since     zset, id -> claimable since (ms)
-- KEYS[4] -> {prefix}seq               FIFO counter
-- KEYS[5] -> {prefix}wake              capped list of wake-up hints
-- KEYS[6] -> {prefix}scheduled         zset, id -> scheduled_at (ms)
-- KEYS[7] -> {prefix}idem:<key>        hash {digest, job_id}; only read when ARGV[8] ~= ''
--
-- ARGV[1] -> job id (UUIDv4, chosen by the caller)
-- ARGV[2] -> type
-- ARGV[3] -> payload (JSON text)
-- ARGV[4] -> priority (integer)
-- ARGV[5] -> max_retries (maximum number of executions)
-- ARGV[6] -> scheduled_at (ms) or ''
-- ARGV[7] -> timeout (seconds) or ''
-- ARGV[8] -> digest of the canonical request, or '' without an idempotency key
-- ARGV[9] -> idempotency key TTL (ms)
-- ARGV[10] -> wake list cap
-- ARGV[11] -> now (ms) override, or '' for Redis TIME
-- ARGV[12] -> job key prefix ({prefix}job:), to look up the job an idempotency key names: the
--             one key built here, inside the same hash tag, because only Redis knows that id
-- ARGV[13] -> optional: W3C traceparent of the enqueue span, stored as field `traceparent`
--             (absent or '' when tracing is off: nothing is stored)
--
-- Returns {DONE, id, status, created_at} for a new job (also when this call is repeated),
--         {DUPLICATE, existing id, status, created_at} when the key already names a job for
--         this request,
--         {CONFLICT, existing id} when the key names a job for a different request.
-- Redis commands for a new pending job: 7 (HMGET, TIME, INCR, ZADD, ZADD, LPUSH, HSET; an LTRIM
-- more once per half-cap enqueues while no worker takes the hints), 9 with an idempotency key
-- (its HMGET replaces the job's, then HSET and PEXPIRE of the key).

local DONE = 1           -- the transition happened (or had already happened for this request)
local DUPLICATE = 2      -- enqueue: the idempotency key already names a job for this request
local CONFLICT = -4      -- enqueue: the idempotency key names a job for a different request
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

local job_key, job_id, digest = KEYS[1], ARGV[1], ARGV[8]

-- The answer to a repeat of this call (the job already exists), or nil.
local function existing(key)
  local state = redis.call('HMGET', key, 'status', 'created_at')
  if state[1] then
    return {DONE, job_id, state[1], tonumber(state[2])}
  end
  return nil
end

if digest == '' then
  local repeated = existing(job_key)
  if repeated then
    return repeated
  end
else
  -- The idempotency key names every job this call could have created: one read answers both
  -- "is this a repeat?" and "is this key already used?".
  local prior = redis.call('HMGET', KEYS[7], 'digest', 'job_id')
  if prior[1] and prior[2] == job_id then
    local repeated = existing(job_key)
    if repeated then
      return repeated
    end
  elseif prior[1] then
    local prior_job = redis.call('HMGET', ARGV[12] .. prior[2], 'status', 'created_at')
    -- A key whose job was already deleted (retention, purge) is forgotten: enqueue anew.
    if prior_job[1] then
      if prior[1] ~= digest then
        return {CONFLICT, prior[2]}
      end
      return {DUPLICATE, prior[2], prior_job[1], tonumber(prior_job[2])}
    end
  end
end

local now = now_ms(ARGV[11])
-- Numbers are formatted once, as %d: redis.call formats a Lua number with %.17g on each use.
local stamp = string.format('%d', now)
local scheduled_at = ARGV[6] ~= '' and tonumber(ARGV[6]) or nil
local status = (scheduled_at and scheduled_at > now) and 'scheduled' or 'pending'
-- The fields every transition reads or writes come first: Redis keeps a small hash as a list
-- and looks each field up in order.
local fields = {'status', status, 'token', '0', 'attempts', '0', 'updated_at', stamp,
  'id', job_id, 'type', ARGV[2], 'payload', ARGV[3], 'priority', ARGV[4],
  'max_retries', ARGV[5], 'recoveries', '0', 'created_at', stamp}
local function add(name, value)
  fields[#fields + 1] = name
  fields[#fields + 1] = value
end
if ARGV[7] ~= '' then
  add('timeout', ARGV[7])
end
if ARGV[13] and ARGV[13] ~= '' then
  add('traceparent', ARGV[13])
end
if scheduled_at then
  add('scheduled_at', ARGV[6])
end
if status == 'scheduled' then
  redis.call('ZADD', KEYS[6], ARGV[6], job_id)
else
  local seq = redis.call('INCR', KEYS[4])
  add('seq', string.format('%d', seq))
  add('eligible_at', stamp)
  index_pending({KEYS[2], KEYS[3], KEYS[5]}, job_id, ARGV[4], seq, stamp, tonumber(ARGV[10]))
end
-- The whole hash in one write: every field this job starts with.
redis.call('HSET', job_key, unpack(fields))

if digest ~= '' then
  redis.call('HSET', KEYS[7], 'digest', digest, 'job_id', job_id)
  redis.call('PEXPIRE', KEYS[7], ARGV[9])
end
return {DONE, job_id, status, now}
