#!lua flags=allow-oom
-- trim: enforce retention: forget completed and canceled jobs past their retention or beyond
-- their maximum count, and dead jobs past the DLQ's maximum age or beyond its maximum count
-- (oldest first). The counts bound Redis memory under sustained load: at 1,000 jobs/s a day's
-- retention alone would keep 86 million finished jobs. It also forgets the per-second failure
-- counts (fail.lua) older than a minute, once the hash holds more than FAILURE_SECONDS_KEPT.
--
-- First it rolls what finished since its last call into per-minute throughput buckets: the
-- completed index holds only the last TASK_FINISHED_MAX_JOBS (50 s at 2,000 jobs/s) and the
-- failure seconds last a minute, yet the dashboard charts an hour. Trim is the only script
-- that removes completed entries or failure seconds, and the scheduler calls it every second
-- for each queue holding either, so counting here, before forgetting, costs the hot path
-- (complete, fail) nothing. Everything up to the watermark `mark` (ms, the end of a whole
-- second, SETTLE_MS behind now so that a finish stamped a moment earlier is not missed) is
-- counted once: completions by ZCOUNT per minute the range spans, failure seconds by HMGET;
-- a completed entry forgotten before it was rolled (the count cap, past 50,000 jobs/s) is
-- counted as it goes. shared/read/throughput.py adds what lies after the mark, read live.
--
-- A job whose id its client chose (version 8: shared/model/job_ids.py) is kept, by either rule,
-- until it finished ARGV[8] ago: its hash is the memory of the id, and a producer retrying the
-- enqueue within that time must find it, not make a second job. So above the count cap a
-- queue holds, besides, those finished within ARGV[8] (at most rate x ARGV[8]); an index's
-- oldest entries being such jobs, the cap waits for them to age before going further.
--
-- Invariant: an index entry and its job hash are deleted together; a job whose status no
-- longer matches the index (it cannot, but an operator can edit Redis) keeps its hash. Each
-- completion and each failed execution is counted in exactly one minute bucket, once.
-- Bounded work per call; Scripts.trim calls it again while a call deleted its limit from an
-- index (more may be left), so the caps hold above `limit` finished jobs a second.
--
-- KEYS[1] -> {prefix}completed   zset, id -> finished_at (ms)
-- KEYS[2] -> {prefix}canceled    zset, id -> canceled at (ms)
-- KEYS[3] -> {prefix}dead        zset, id -> time of death (ms)
-- KEYS[4] -> {prefix}reply:<request>  this call's answer, kept 15 s for a repeated call
-- KEYS[5] -> {prefix}failures    hash, second (epoch s) -> failed executions
-- KEYS[6] -> {prefix}throughput  hash, c:<epoch minute> -> completions, f:<epoch minute> ->
--                                failed executions, mark -> rolled up to here (ms, inclusive)
--
-- ARGV[1] -> job_prefix: job key prefix ({prefix}job:); hashes of ids read from the indexes are built from
--            it, inside the same hash tag
-- ARGV[2] -> retention_ms: retention of completed and canceled jobs (ms)
-- ARGV[3] -> dead_max_age_ms: maximum age of a dead job (ms)
-- ARGV[4] -> dead_max_jobs: maximum number of dead jobs
-- ARGV[5] -> limit: most jobs to delete from each index in this call
-- ARGV[6] -> now_ms: now (ms) override, or '' for Redis TIME
-- ARGV[7] -> finished_max_jobs: maximum number of completed jobs, and of canceled jobs (each index apart)
-- ARGV[8] -> client_id_memory_ms: a client-id job is kept at least this long after it finished (ms)
--
-- Returns {completed deleted, canceled deleted, dead deleted}.
--
-- Redis commands, with nothing to forget: 13 on a call that rolls up a new second (GET of the
-- reply key, TIME, HGET mark, ZCOUNT, HMGET of the failure seconds, HSET mark, 3
-- ZRANGEBYSCORE, 3 ZCARD, HLEN), plus an HINCRBY per bucket that grew (completions,
-- failures), one more ZCOUNT in the second after a minute turned and an HDEL of the bucket an
-- hour old once a minute; 10 on another call within the same second (Scripts.trim's repeat
-- rounds: no roll-up). Before the roll-up: 9. Forgetting adds an HGET, a DEL and a ZREM per
-- job, and the reply's SET (and HINCRBY for a completion forgotten before it was rolled up).

--- @include "codes"
--- @include "common"

local saved = remembered_reply(KEYS[4])
if saved then
  return saved
end
local prefix, limit = ARGV[1], tonumber(ARGV[5])
local now = now_ms(ARGV[6])

local SETTLE_MS = 2000
local MINUTE_MS = 60000
-- Buckets of this many minutes back from the mark's are kept: the hour the dashboard shows,
-- the current minute, one to spare.
local KEPT_MINUTES = 62

local bucket_adds = {}
local function count(field, n)
  bucket_adds[field] = (bucket_adds[field] or 0) + n
end

local function roll_up()
  local upto = math.floor((now - SETTLE_MS) / 1000) * 1000 - 1
  local mark = tonumber(redis.call('HGET', KEYS[6], 'mark'))
  if mark and mark >= upto then
    return mark
  end
  -- A mark older than the kept hour (no trim for that long; or none yet): older is not shown.
  local from = math.max(mark or 0, upto - KEPT_MINUTES * MINUTE_MS)
  local minute = math.floor((from + 1) / MINUTE_MS)
  while minute * MINUTE_MS <= upto do
    local low = math.max(from, minute * MINUTE_MS - 1)
    local high = math.min(upto, (minute + 1) * MINUTE_MS - 1)
    local n = redis.call('ZCOUNT', KEYS[1], '(' .. low, high)
    if n > 0 then
      count('c:' .. minute, n)
    end
    minute = minute + 1
  end
  each_failure_second(KEYS[5], math.floor(from / 1000) + 1, (upto + 1) / 1000 - 1,
    function(second, failures)
      count('f:' .. math.floor(second / 60), failures)
    end)
  redis.call('HSET', KEYS[6], 'mark', upto)
  if mark then
    -- The buckets that left the kept hour since the last roll-up (at most KEPT_MINUTES).
    local stale = {}
    local last_stale = math.floor(upto / MINUTE_MS) - KEPT_MINUTES
    local first_stale = math.max(math.floor(mark / MINUTE_MS) - KEPT_MINUTES + 1,
      last_stale - KEPT_MINUTES)
    for old = first_stale, last_stale do
      stale[#stale + 1] = 'c:' .. old
      stale[#stale + 1] = 'f:' .. old
    end
    if #stale > 0 then
      redis.call('HDEL', KEYS[6], unpack(stale))
    end
  end
  return upto
end

local mark = roll_up()

-- `entries` is a flat list id, score (WITHSCORES). A completion forgotten after the mark was
-- not rolled up: count it now, or it would never be.
local young = now - tonumber(ARGV[8])
local function forget(index_key, status, entries)
  local forgotten = 0
  for i = 1, #entries, 2 do
    local job_id = entries[i]
    local score = tonumber(entries[i + 1])
    -- The version digit of a client's id (the 15th character): kept while young.
    if score <= young or string.sub(job_id, 15, 15) ~= '8' then
      local job_key = prefix .. job_id
      local current = redis.call('HGET', job_key, 'status')
      if current == status or not current then
        redis.call('DEL', job_key)
      end
      redis.call('ZREM', index_key, job_id)
      if index_key == KEYS[1] and score > mark then
        count('c:' .. math.floor(score / MINUTE_MS), 1)
      end
      forgotten = forgotten + 1
    end
  end
  return forgotten
end

local function older_than(index_key, cutoff)
  return redis.call('ZRANGEBYSCORE', index_key, '-inf', '(' .. cutoff, 'WITHSCORES', 'LIMIT', 0,
    limit)
end

-- Forget the oldest entries of an index beyond `cap`, at most `limit` per call.
local function beyond(index_key, status, cap)
  local excess = redis.call('ZCARD', index_key) - cap
  if excess <= 0 then
    return 0
  end
  return forget(index_key, status,
    redis.call('ZRANGE', index_key, 0, math.min(excess, limit) - 1, 'WITHSCORES'))
end

local completed = forget(KEYS[1], 'completed', older_than(KEYS[1], now - tonumber(ARGV[2])))
completed = completed + beyond(KEYS[1], 'completed', tonumber(ARGV[7]))
local canceled = forget(KEYS[2], 'canceled', older_than(KEYS[2], now - tonumber(ARGV[2])))
canceled = canceled + beyond(KEYS[2], 'canceled', tonumber(ARGV[7]))
local dead = forget(KEYS[3], 'dead', older_than(KEYS[3], now - tonumber(ARGV[3])))
dead = dead + beyond(KEYS[3], 'dead', tonumber(ARGV[4]))
for field, n in pairs(bucket_adds) do
  redis.call('HINCRBY', KEYS[6], field, n)
end

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
