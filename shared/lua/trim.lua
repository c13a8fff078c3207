#!lua flags=allow-oom
-- trim: enforce retention: forget completed and canceled jobs past their retention, and dead
-- jobs past the DLQ's maximum age or beyond its maximum count (oldest first).
--
-- Invariant: an index entry and its job hash are deleted together; a job whose status no
-- longer matches the index (it cannot, but an operator can edit Redis) keeps its hash.
-- Bounded work per call; the scheduler calls it every tick until nothing is left to trim.
--
-- KEYS[1] -> {prefix}completed   zset, id -> finished_at (ms)
-- KEYS[2] -> {prefix}canceled    zset, id -> canceled at (ms)
-- KEYS[3] -> {prefix}dead        zset, id -> time of death (ms)
-- KEYS[4] -> {prefix}reply:<request>  this call's answer, kept 15 s for a repeated call
--
-- ARGV[1] -> job key prefix ({prefix}job:); hashes of ids read from the indexes are built from
--            it, inside the same hash tag
-- ARGV[2] -> retention of completed and canceled jobs (ms)
-- ARGV[3] -> maximum age of a dead job (ms)
-- ARGV[4] -> maximum number of dead jobs
-- ARGV[5] -> most jobs to delete from each index in this call
-- ARGV[6] -> now (ms) override, or '' for Redis TIME
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

local completed = forget(KEYS[1], 'completed', older_than(KEYS[1], now - tonumber(ARGV[2])))
local canceled = forget(KEYS[2], 'canceled', older_than(KEYS[2], now - tonumber(ARGV[2])))
local dead = forget(KEYS[3], 'dead', older_than(KEYS[3], now - tonumber(ARGV[3])))
local excess = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[4])
if excess > 0 then
  dead = dead + forget(KEYS[3], 'dead',
    redis.call('ZRANGE', KEYS[3], 0, math.min(excess, limit) - 1))
end
if completed + canceled + dead > 0 then
  remember_reply(KEYS[4], {completed, canceled, dead})
end
return {completed, canceled, dead}
