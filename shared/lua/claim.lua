#!lua
-- claim: pop the best pending job and start it, in one step.
--
-- Invariant: a job leaves `pending` only by becoming `processing` with attempts+1, started_at,
-- the worker's id, a lease deadline in `processing` and a fresh fencing token, all at once: no
-- crash window between the pop and the metadata (the primary spec's documented gap).
-- Best = highest priority, then lowest sequence (FIFO). A repeated call with the same request
-- id (a reply lost and retried) returns the job that request already claimed instead of
-- claiming a second one.
--
-- The job keeps its `seq` field: if its worker is lost it goes back to the same place in line.
--
-- KEYS[1] -> {prefix}pending          zset, score -priority, member <seq>:<id>
-- KEYS[2] -> {prefix}pending_since    zset, id -> claimable since (ms)
-- KEYS[3] -> {prefix}processing       zset, id -> lease deadline (ms)
-- KEYS[4] -> {prefix}claim:<worker>   string "<request id>|<job id>", lives one lease
--
-- ARGV[1] -> job key prefix ({prefix}job:); the popped id's hash is built from it, inside the
--            same hash tag (the one exception to "every key in KEYS": only Redis knows the id)
-- ARGV[2] -> worker id
-- ARGV[3] -> lease length (ms)
-- ARGV[4] -> request id (unique per claim call)
-- ARGV[5] -> now (ms) override, or '' for Redis TIME
--
-- Returns {DONE, HGETALL of the claimed job} or {EMPTY}.

--- @include "codes"
--- @include "common"

local prefix, worker_id, request_id = ARGV[1], ARGV[2], ARGV[4]
local lease = tonumber(ARGV[3])
local now = now_ms(ARGV[5])

local last = redis.call('GET', KEYS[4])
if last then
  local sep = string.find(last, '|', 1, true)
  if string.sub(last, 1, sep - 1) == request_id then
    local job_key = prefix .. string.sub(last, sep + 1)
    local state = redis.call('HMGET', job_key, 'status', 'worker_id')
    if state[1] == 'processing' and state[2] == worker_id then
      return {DONE, redis.call('HGETALL', job_key)}
    end
    return {EMPTY}
  end
end

-- Bounded: an entry whose hash is gone (deleted by hand) is dropped and the next one tried.
for _ = 1, 100 do
  local popped = redis.call('ZPOPMIN', KEYS[1])
  if #popped == 0 then
    return {EMPTY}
  end
  local member = popped[1]
  local job_id = string.sub(member, string.find(member, ':', 1, true) + 1)
  local job_key = prefix .. job_id
  redis.call('ZREM', KEYS[2], job_id)
  if redis.call('HGET', job_key, 'status') == 'pending' then
    redis.call('HINCRBY', job_key, 'token', 1)
    redis.call('HINCRBY', job_key, 'attempts', 1)
    redis.call('HSET', job_key, 'status', 'processing', 'started_at', now, 'updated_at', now,
      'worker_id', worker_id)
    redis.call('ZADD', KEYS[3], now + lease, job_id)
    redis.call('SET', KEYS[4], request_id .. '|' .. job_id, 'PX', lease)
    return {DONE, redis.call('HGETALL', job_key)}
  end
end
return {EMPTY}
