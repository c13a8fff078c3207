#!lua flags=allow-oom
-- recover: requeue jobs whose lease expired (their worker or whole host is gone).
--
-- Invariant: losing a worker is not an application failure: the lost execution is given back
-- (attempts - 1, so it does not use up max_retries) and `recoveries` counts the loss; past
-- the recovery cap the job is dead with an error that says so (a poison pill that kills its
-- workers). The job's token moves on, so the lost worker, if
-- it was only paused, can no longer write. Safe to run from several schedulers at once.
--
-- KEYS[1] -> {prefix}processing      zset, id -> lease deadline (ms)
-- KEYS[2] -> {prefix}pending         zset, score -priority, member <seq>:<id>
-- KEYS[3] -> {prefix}pending_since   zset, id -> claimable since (ms)
-- KEYS[4] -> {prefix}seq             FIFO counter
-- KEYS[5] -> {prefix}wake            capped list of wake-up hints
-- KEYS[6] -> {prefix}dead            zset, id -> time of death (ms)
-- KEYS[7] -> {prefix}reply:<request>  this call's answer, kept 15 s for a repeated call
--
-- ARGV[1] -> job key prefix ({prefix}job:); hashes of ids read from KEYS[1] are built from it
-- ARGV[2] -> most jobs to recover in this call
-- ARGV[3] -> recovery cap (losses allowed before the job is dead)
-- ARGV[4] -> TTL of a dead job's hash (ms)
-- ARGV[5] -> wake list cap
-- ARGV[6] -> now (ms) override, or '' for Redis TIME
--
-- Returns {requeued ids, dead ids, requeued types, dead types}: each types list holds the job
-- type of the id at the same position (for per-type counters, without a read per job).

local DONE = 1           -- the transition happened (or had already happened for this request)
local DEAD = 4           -- fail/release: the job is dead and in the DLQ
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
-- Move a job to the dead-letter queue, recording why its last execution failed ("Type:
-- message") and, for a handler's exception, its traceback; a failure without one (a timeout, a
-- lost worker) removes the previous failure's traceback, so the two fields always describe
-- the same failure. Its hash expires after the DLQ's maximum age; trim.lua removes it (and
-- its index entry) earlier when the DLQ is over its count cap.
local function make_dead(dead_key, job_key, job_id, error_text, traceback, now, ttl_ms)
  if traceback ~= '' then
    redis.call('HSET', job_key, 'status', 'dead', 'finished_at', now, 'updated_at', now,
      'last_error', error_text, 'traceback', traceback)
    redis.call('HDEL', job_key, 'next_retry_at', 'seq')
  else
    redis.call('HSET', job_key, 'status', 'dead', 'finished_at', now, 'updated_at', now,
      'last_error', error_text)
    redis.call('HDEL', job_key, 'next_retry_at', 'seq', 'traceback')
  end
  redis.call('ZADD', dead_key, now, job_id)
  redis.call('PEXPIRE', job_key, ttl_ms)
end
-- A job lost its worker: count it (unless the worker let go on purpose, by draining) and
-- requeue it, or declare it dead once it has lost workers more often than the cap allows.
-- The lost execution is given back (attempts - 1): losing a worker is not an application
-- failure, so it must not use up max_retries; `recoveries` counts it instead.
-- keys = {pending, pending_since, seq, wake, dead}
local function lose_worker(keys, job_key, job_id, counts, cap, dead_ttl_ms, wake_cap, now)
  -- A new token fences off the lost worker: if it was only paused, its late writes are refused.
  redis.call('HINCRBY', job_key, 'token', 1)
  if tonumber(redis.call('HGET', job_key, 'attempts')) > 0 then
    redis.call('HINCRBY', job_key, 'attempts', -1)
  end
  if counts then
    local recoveries = redis.call('HINCRBY', job_key, 'recoveries', 1)
    if recoveries > cap then
      make_dead(keys[5], job_key, job_id,
        'WorkerLost: worker lost ' .. recoveries .. ' times (recovery cap ' .. cap .. '): ' ..
        'the job may be killing its worker', '', now, dead_ttl_ms)
      return DEAD
    end
  end
  make_pending({keys[1], keys[2], keys[3], keys[4]}, job_key, job_id, now, wake_cap, true)
  return DONE
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
local prefix = ARGV[1]
local now = now_ms(ARGV[6])
local loss_keys = {KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]}
local requeued, dead, requeued_types, dead_types = {}, {}, {}, {}

-- A lease that ends exactly now is still held: expired means deadline < now.
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now, 'LIMIT', 0, ARGV[2])
for _, job_id in ipairs(expired) do
  local job_key = prefix .. job_id
  redis.call('ZREM', KEYS[1], job_id)
  local state = redis.call('HMGET', job_key, 'status', 'type')
  if state[1] == 'processing' then
    local outcome = lose_worker(loss_keys, job_key, job_id, true, tonumber(ARGV[3]), ARGV[4],
      tonumber(ARGV[5]), now)
    if outcome == DEAD then
      dead[#dead + 1] = job_id
      dead_types[#dead_types + 1] = state[2]
    else
      requeued[#requeued + 1] = job_id
      requeued_types[#requeued_types + 1] = state[2]
    end
  end
end
local reply = {requeued, dead, requeued_types, dead_types}
if #expired > 0 then
  remember_reply(KEYS[7], reply)
end
return reply
