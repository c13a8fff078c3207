#!lua flags=allow-oom
-- claim: pop the best pending job and start it, in one step.
--
-- Invariant: a job leaves `pending` only by becoming `processing` with attempts+1, started_at,
-- the worker's id, a lease deadline in `processing` and a fresh fencing token, all at once.
-- Were the pop and the metadata update two steps, a worker dying between them would leave a
-- job out of `pending` but still marked pending, where no recovery looks for it.
-- Best = highest priority, then lowest sequence (FIFO). A repeated call with the same request
-- id (a reply lost and retried) returns the job that request already claimed instead of
-- claiming a second one. The job keeps its `seq` field: if its worker is lost it goes back to
-- the same place in line.
--
-- KEYS[1] -> {prefix}pending          zset, score -priority, member <seq>:<id>
-- KEYS[2] -> {prefix}pending_since    zset, id -> claimable since (ms)
-- KEYS[3] -> {prefix}processing       zset, id -> lease deadline (ms)
-- KEYS[4] -> {prefix}claim:<worker>   string "<request id>|<job id>", lives one lease
-- KEYS[5] -> {prefix}wake             capped list of wake-up hints; emptied when none is claimable
--
-- ARGV[1] -> job key prefix ({prefix}job:); the popped id's hash is built from it, inside the
--            same hash tag (the one exception to "every key in KEYS": only Redis knows the id)
-- ARGV[2] -> worker id
-- ARGV[3] -> lease length (ms)
-- ARGV[4] -> request id (unique per claim call)
-- ARGV[5] -> now (ms) override, or '' for Redis TIME
--
-- Returns {DONE, v1, ..., v14}: the code, then the claim reply's values (the job's fields in a
--         fixed order: see includes/claim.lua), in one flat list; or {EMPTY}.
-- Redis commands: 8 when a job is claimed (GET, ZPOPMIN, ZREM, HMGET, TIME, HSET, ZADD, SET),
-- 3 when none is (GET, ZPOPMIN, DEL); tests/engine/test_budgets.py holds them to it.

-- Return codes shared by every script; shared/scripts.py maps them once to the Code enum.
local EMPTY = 0          -- nothing to do (no claimable job)
local DONE = 1           -- the transition happened (or had already happened for this request)
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

local prefix, worker_id, request_id = ARGV[1], ARGV[2], ARGV[4]
-- A repeated call (its reply was lost and redis-py retried) gets the job it already claimed.
local last = redis.call('GET', KEYS[4])
if last then
  local sep = string.find(last, '|', 1, true)
  if string.sub(last, 1, sep - 1) == request_id then
    local fields = reply_fields()
    local n = #fields
    fields[n + 1], fields[n + 2] = 'status', 'worker_id'
    local job = redis.call('HMGET', prefix .. string.sub(last, sep + 1), unpack(fields))
    if job[n + 1] == 'processing' and job[n + 2] == worker_id then
      job[n + 1], job[n + 2] = nil, nil
      table.insert(job, 1, DONE)
      return job
    end
    return {EMPTY}
  end
end

local job = claim_next({KEYS[1], KEYS[2], KEYS[3], KEYS[5]}, prefix, worker_id,
  tonumber(ARGV[3]), function() return now_ms(ARGV[5]) end)
if not job then
  return {EMPTY}
end
redis.call('SET', KEYS[4], request_id .. '|' .. job[1], 'PX', ARGV[3])
table.insert(job, 1, DONE)
return job
