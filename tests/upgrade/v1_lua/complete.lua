#!lua flags=allow-oom
-- complete: record a job's success and its result; optionally claim the worker's next job in
-- the same step (one round trip per job on a busy worker).
--
-- Invariant: only the worker holding the current fencing token completes a processing job;
-- the job leaves `processing` and enters `completed` in the same step. A repeated call with the
-- same token (reply lost, retried) answers DONE again and changes nothing more; its claim part
-- returns the job the first call claimed, which the worker holds (a worker runs one job at a
-- time). Nothing is claimed when the completion itself is refused.
--
-- KEYS[1] -> {prefix}job:<id>
-- KEYS[2] -> {prefix}processing       zset, id -> lease deadline (ms)
-- KEYS[3] -> {prefix}completed        zset, id -> finished_at (ms); trimmed by trim.lua
-- KEYS[4] -> {prefix}pending          zset, score -priority, member <seq>:<id>   (claim only)
-- KEYS[5] -> {prefix}pending_since    zset, id -> claimable since (ms)           (claim only)
-- KEYS[6] -> {prefix}wake             capped list of wake-up hints              (claim only)
--
-- ARGV[1] -> fencing token
-- ARGV[2] -> result (JSON text)
-- ARGV[3] -> now (ms) override, or '' for Redis TIME
-- ARGV[4] -> job key prefix ({prefix}job:) for the claimed job, as in claim.lua  (claim only)
-- ARGV[5] -> worker id claiming its next job, or '' to claim nothing
-- ARGV[6] -> lease length (ms)                                                    (claim only)
--
-- A completed job keeps what its JSON shows, its token (a repeated or stale call is told apart
-- by it) and eligible_at; it drops its id (the key holds it), seq and worker_id, and has no
-- TTL: trim.lua bounds completed jobs by count and age (docs/JOBS.md, memory).
--
-- Returns {DONE}, or {DONE, v1, ..., v14} with the claim reply of the next job after the code
--         (see includes/claim.lua), {NOT_FOUND}, or {STALE_TOKEN, current status}.
-- Redis commands: 11 when it completes and claims (HMGET, TIME, HSET, HDEL, ZREM, ZADD,
-- then ZPOPMIN, ZREM, HMGET, HSET, ZADD), 8 when nothing is left to claim (ZPOPMIN, DEL).

local DONE = 1           -- the transition happened (or had already happened for this request)
local NOT_FOUND = -1     -- no such job
local STALE_TOKEN = -3   -- the caller's fencing token is not the job's current one
-- Milliseconds on Redis's clock, or the caller's override (tests control time this way).
-- One clock for every host: leases and schedules compare times written by different machines.
local function now_ms(override)
  if override ~= nil and override ~= '' then
    return tonumber(override)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- Pop the best pending job and start it for one worker (claim.lua, and complete.lua when it
-- also claims the worker's next job). Needs codes included first.
--
-- A claim reply is the job's fields in CLAIM_FIELDS order, with started_at in the place of the
-- last, status (shared/scripts.py parses it by position and fills in what the caller knows: the
-- status, processing; updated_at, which equals started_at; its own worker id). What a worker
-- needs, read in the one HMGET that also checks the job is still pending; the values a claim
-- changes are filled in here rather than read back after the write. Every value crosses from
-- Redis to Lua and back once per job, so the reply carries nothing the caller already has, and
-- the scripts answer it after their code in one flat list (Redis converts each nested table
-- with checks of its own).
local CLAIM_FIELDS = {'id', 'type', 'priority', 'max_retries', 'attempts', 'recoveries',
  'payload', 'created_at', 'token', 'scheduled_at', 'timeout', 'eligible_at', 'traceparent',
  'status'}
local F_ATTEMPTS, F_TOKEN, F_STATUS = 5, 9, 14
-- The fields a repeated claim reads back: the reply's, started_at where a claim reads status.
local function reply_fields()
  local fields = {unpack(CLAIM_FIELDS)}
  fields[F_STATUS] = 'started_at'
  return fields
end
-- Every processing job this worker holds, as {job_key, job_id, type}. A scan of `processing`
-- (one entry per running job, so about one per live worker): only repeats of a claim whose
-- reply was lost and the release of a dead worker's job need it, never a first claim.
local function held_by(processing_key, prefix, worker_id)
  local held = {}
  for _, job_id in ipairs(redis.call('ZRANGE', processing_key, 0, -1)) do
    local job_key = prefix .. job_id
    local state = redis.call('HMGET', job_key, 'worker_id', 'status', 'type')
    if state[1] == worker_id and state[2] == 'processing' then
      held[#held + 1] = {job_key, job_id, state[3]}
    end
  end
  return held
end
-- The claim reply for a job this worker already holds (a repeated call whose first reply was
-- lost), or nil when it holds none. A worker runs one job at a time, so the job it holds is the
-- one the lost call claimed; were there several, the latest lease is the latest claim.
local function claimed_before(processing_key, prefix, worker_id)
  local held = held_by(processing_key, prefix, worker_id)
  if #held == 0 then
    return nil
  end
  return redis.call('HMGET', held[#held][1], unpack(reply_fields()))
end
-- keys = {pending, pending_since, processing, wake}. now: a number, or a function returning
-- one (Redis TIME is read only once there is a job to start).
-- Returns the claim reply, or nil when nothing is claimable (the wake hints are then cleared:
-- they would only send idle workers into more empty claims).
local function claim_next(keys, prefix, worker_id, lease, now)
  -- Bounded: an entry whose hash is gone (deleted by hand) is dropped and the next one tried.
  for _ = 1, 100 do
    local popped = redis.call('ZPOPMIN', keys[1])
    if #popped == 0 then
      redis.call('DEL', keys[4])
      return nil
    end
    local member = popped[1]
    local job_id = string.sub(member, string.find(member, ':', 1, true) + 1)
    local job_key = prefix .. job_id
    redis.call('ZREM', keys[2], job_id)
    local job = redis.call('HMGET', job_key, unpack(CLAIM_FIELDS))
    if job[F_STATUS] == 'pending' then
      if type(now) == 'function' then
        now = now()
      end
      -- Strings, as HMGET answers them: a repeated call's reply is the same bytes.
      local started = string.format('%d', now)
      job[F_ATTEMPTS] = string.format('%d', tonumber(job[F_ATTEMPTS]) + 1)
      job[F_TOKEN] = string.format('%d', tonumber(job[F_TOKEN]) + 1)
      redis.call('HSET', job_key, 'status', 'processing', 'token', job[F_TOKEN],
        'attempts', job[F_ATTEMPTS], 'started_at', started, 'updated_at', started,
        'worker_id', worker_id)
      redis.call('ZADD', keys[3], string.format('%d', now + lease), job_id)
      job[F_STATUS] = started
      return job
    end
  end
  return nil
end

local state = redis.call('HMGET', KEYS[1], 'status', 'token', 'id')
if not state[1] then
  return {NOT_FOUND}
end
if state[2] ~= ARGV[1] then
  return {STALE_TOKEN, state[1]}
end
local prefix, worker_id = ARGV[4], ARGV[5]
if state[1] == 'completed' then
  -- A repeat: this call already ran. Nothing more to write; give back what it claimed.
  local job = worker_id ~= '' and claimed_before(KEYS[2], prefix, worker_id)
  if job then
    table.insert(job, 1, DONE)
    return job
  end
  return {DONE}
end
if state[1] ~= 'processing' then
  return {STALE_TOKEN, state[1]}
end

local now = now_ms(ARGV[3])
-- Formatted once: a number given to redis.call is formatted with %.17g on every use.
local stamp = string.format('%d', now)
redis.call('HSET', KEYS[1], 'status', 'completed', 'result', ARGV[2], 'finished_at', stamp,
  'updated_at', stamp)
-- Nothing reads these once the job is done; without them the hash fits a smaller allocation.
redis.call('HDEL', KEYS[1], 'id', 'seq', 'worker_id')
redis.call('ZREM', KEYS[2], state[3])
redis.call('ZADD', KEYS[3], stamp, state[3])
if worker_id ~= '' then
  local job = claim_next({KEYS[4], KEYS[5], KEYS[2], KEYS[6]}, prefix, worker_id,
    tonumber(ARGV[6]), now)
  if job then
    table.insert(job, 1, DONE)
    return job
  end
end
return {DONE}
