#!lua flags=allow-oom
-- trim: enforce retention: forget completed and canceled jobs past their retention or beyond
-- their maximum count, and dead jobs past the DLQ's maximum age or beyond its maximum count
-- (oldest first). The counts bound Redis memory under sustained load: at 1,000 jobs/s a day's
-- retention alone would keep 86 million finished jobs. It also forgets the per-second failure
-- counts (fail.lua) older than a minute, once the hash holds more than FAILURE_SECONDS_KEPT.
--
-- Invariant: an index entry and its job hash are deleted together; a job whose status no
-- longer matches the index (it cannot, but an operator can edit Redis) keeps its hash.
-- Bounded work per call; Scripts.trim calls it again while a call deleted its limit from an
-- index (more may be left), so the caps hold above `limit` finished jobs a second.
--
-- KEYS[1] -> {prefix}completed   zset, id -> finished_at (ms)
-- KEYS[2] -> {prefix}canceled    zset, id -> canceled at (ms)
-- KEYS[3] -> {prefix}dead        zset, id -> time of death (ms)
-- KEYS[4] -> {prefix}reply:<request>  this call's answer, kept 15 s for a repeated call
-- KEYS[5] -> {prefix}failures    hash, second (epoch s) -> failed executions
--
-- ARGV[1] -> job key prefix ({prefix}job:); hashes of ids read from the indexes are built from
--            it, inside the same hash tag
-- ARGV[2] -> retention of completed and canceled jobs (ms)
-- ARGV[3] -> maximum age of a dead job (ms)
-- ARGV[4] -> maximum number of dead jobs
-- ARGV[5] -> most jobs to delete from each index in this call
-- ARGV[6] -> now (ms) override, or '' for Redis TIME
-- ARGV[7] -> maximum number of completed jobs, and of canceled jobs (each index apart)
--
-- Returns {completed deleted, canceled deleted, dead deleted}.

--- @include "codes"
--- @include "common"

local saved = remembered_reply(KEYS[4])
if saved then
  return saved
end
local prefix, limit = ARGV[1], tonumber(ARGV[5])
local now = now_ms(ARGV[6])

local function forget(index_key, status, ids)
  for _, job_id in ipairs(ids) do
    local job_key = prefix .. job_id
    local current = redis.call('HGET', job_key, 'status')
    if current == status or not current then
      redis.call('DEL', job_key)
    end
    redis.call('ZREM', index_key, job_id)
  end
  return #ids
end

local function older_than(index_key, cutoff)
  return redis.call('ZRANGEBYSCORE', index_key, '-inf', '(' .. cutoff, 'LIMIT', 0, limit)
end

-- Forget the oldest entries of an index beyond `cap`, at most `limit` per call.
local function beyond(index_key, status, cap)
  local excess = redis.call('ZCARD', index_key) - cap
  if excess <= 0 then
    return 0
  end
  return forget(index_key, status, redis.call('ZRANGE', index_key, 0, math.min(excess, limit) - 1))
end

local completed = forget(KEYS[1], 'completed', older_than(KEYS[1], now - tonumber(ARGV[2])))
completed = completed + beyond(KEYS[1], 'completed', tonumber(ARGV[7]))
local canceled = forget(KEYS[2], 'canceled', older_than(KEYS[2], now - tonumber(ARGV[2])))
canceled = canceled + beyond(KEYS[2], 'canceled', tonumber(ARGV[7]))
local dead = forget(KEYS[3], 'dead', older_than(KEYS[3], now - tonumber(ARGV[3])))
dead = dead + beyond(KEYS[3], 'dead', tonumber(ARGV[4]))

-- One HLEN a call while the hash is small; past the threshold, every second older than the
-- minute /queues reads goes (in chunks: unpack has a stack limit).
local FAILURE_SECONDS_KEPT = 64
if redis.call('HLEN', KEYS[5]) > FAILURE_SECONDS_KEPT then
  local oldest_kept = math.floor(now / 1000) - 59
  local old = {}
  for _, second in ipairs(redis.call('HKEYS', KEYS[5])) do
    if tonumber(second) < oldest_kept then
      old[#old + 1] = second
      if #old == 1000 then
        redis.call('HDEL', KEYS[5], unpack(old))
        old = {}
      end
    end
  end
  if #old > 0 then
    redis.call('HDEL', KEYS[5], unpack(old))
  end
end
if completed + canceled + dead > 0 then
  remember_reply(KEYS[4], {completed, canceled, dead})
end
return {completed, canceled, dead}
