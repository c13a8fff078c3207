-- Helpers every transition shares. Included (not called across scripts) so each script stays
-- one atomic unit; parameters carry key names so every key still comes from KEYS.

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

-- Make a job claimable: index it by priority and by age, and wake one idle worker.
-- keys = {pending, pending_since, seq, wake}. keep_place: reuse the job's sequence number, so a
-- job that lost its worker goes back to its place in line rather than to the back.
local function make_pending(keys, job_key, job_id, now, wake_cap, keep_place)
  local state = redis.call('HMGET', job_key, 'priority', 'seq', 'eligible_at')
  local priority = tonumber(state[1])
  local seq = keep_place and tonumber(state[2]) or redis.call('INCR', keys[3])
  -- Back in its place, the job has been waiting since it first became claimable.
  local since = keep_place and tonumber(state[3]) or now
  redis.call('ZADD', keys[1], -priority, pending_member(seq, job_id))
  redis.call('ZADD', keys[2], since, job_id)
  redis.call('HSET', job_key, 'status', 'pending', 'seq', seq, 'eligible_at', since,
    'updated_at', now)
  redis.call('LPUSH', keys[4], '1')
  -- A hint only needs to wake a worker; past the cap, extra hints would only cause empty claims.
  redis.call('LTRIM', keys[4], 0, wake_cap - 1)
end

-- Record why the job's last execution failed ("Type: message") and, for a handler's exception,
-- its traceback. A failure without one (a timeout, a lost worker) removes the previous
-- failure's traceback: the two fields always describe the same failure.
local function record_error(job_key, error_text, traceback)
  if traceback ~= '' then
    redis.call('HSET', job_key, 'last_error', error_text, 'traceback', traceback)
  else
    redis.call('HSET', job_key, 'last_error', error_text)
    redis.call('HDEL', job_key, 'traceback')
  end
end

-- Move a job to the dead-letter queue. Its hash expires after the DLQ's maximum age; trim.lua
-- removes it (and its index entry) earlier when the DLQ is over its count cap.
local function make_dead(dead_key, job_key, job_id, error_text, traceback, now, ttl_ms)
  record_error(job_key, error_text, traceback)
  redis.call('HSET', job_key, 'status', 'dead', 'finished_at', now, 'updated_at', now)
  redis.call('HDEL', job_key, 'next_retry_at', 'seq')
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
