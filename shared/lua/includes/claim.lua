-- Pop the best pending job and start it for one worker (claim.lua, and complete.lua when it
-- also claims the worker's next job). Needs codes and common included first.
-- keys = {pending, pending_since, processing, claim:<worker>}
-- Returns the claimed job's HGETALL, or nil when nothing is claimable.
local function claim_next(keys, prefix, worker_id, lease, request_id, now)
  -- A repeated call (its reply was lost and redis-py retried) gets the job it already claimed.
  local last = redis.call('GET', keys[4])
  if last then
    local sep = string.find(last, '|', 1, true)
    if string.sub(last, 1, sep - 1) == request_id then
      local job_key = prefix .. string.sub(last, sep + 1)
      local state = redis.call('HMGET', job_key, 'status', 'worker_id')
      if state[1] == 'processing' and state[2] == worker_id then
        return redis.call('HGETALL', job_key)
      end
      return nil
    end
  end

  -- Bounded: an entry whose hash is gone (deleted by hand) is dropped and the next one tried.
  for _ = 1, 100 do
    local popped = redis.call('ZPOPMIN', keys[1])
    if #popped == 0 then
      return nil
    end
    local member = popped[1]
    local job_id = string.sub(member, string.find(member, ':', 1, true) + 1)
    local job_key = prefix .. job_id
    redis.call('ZREM', keys[2], job_id)
    if redis.call('HGET', job_key, 'status') == 'pending' then
      redis.call('HINCRBY', job_key, 'token', 1)
      redis.call('HINCRBY', job_key, 'attempts', 1)
      redis.call('HSET', job_key, 'status', 'processing', 'started_at', now, 'updated_at', now,
        'worker_id', worker_id)
      redis.call('ZADD', keys[3], now + lease, job_id)
      redis.call('SET', keys[4], request_id .. '|' .. job_id, 'PX', lease)
      return redis.call('HGETALL', job_key)
    end
  end
  return nil
end
