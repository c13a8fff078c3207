#!lua flags=allow-oom
-- promote: make due scheduled and retrying jobs claimable (the one deferred path).
--
-- Invariant: a job leaves `scheduled`/`retrying` only into `pending`, and only once it is due.
-- Jobs due at the same moment are promoted in job-id order (zset ties sort by member). Two
-- schedulers running this at once promote each job once: the ZREM and the move are one step.
--
-- KEYS[1] -> {prefix}scheduled       zset, id -> scheduled_at (ms)
-- KEYS[2] -> {prefix}retrying        zset, id -> next_retry_at (ms)
-- KEYS[3] -> {prefix}pending         zset, score -priority, member <seq>:<id>
-- KEYS[4] -> {prefix}pending_since   zset, id -> claimable since (ms)
-- KEYS[5] -> {prefix}seq             FIFO counter
-- KEYS[6] -> {prefix}wake            capped list of wake-up hints
--
-- ARGV[1] -> job key prefix ({prefix}job:); hashes of ids read from KEYS[1..2] are built from
--            it, inside the same hash tag
-- ARGV[2] -> most jobs to promote from each set in this call
-- ARGV[3] -> wake list cap
-- ARGV[4] -> now (ms) override, or '' for Redis TIME
--
-- Returns {scheduled ids, retrying ids, scheduled lateness (ms), retrying lateness (ms)}:
-- lateness = now - due time, one entry per promoted id, in the same order.

--- @include "codes"
--- @include "common"

local prefix, limit, wake_cap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms(ARGV[4])
local pending_keys = {KEYS[3], KEYS[4], KEYS[5], KEYS[6]}

local function promote_from(index_key, expected_status)
  local ids, lateness = {}, {}
  local due = redis.call('ZRANGEBYSCORE', index_key, '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
  for i = 1, #due, 2 do
    local job_id = due[i]
    local job_key = prefix .. job_id
    redis.call('ZREM', index_key, job_id)
    if redis.call('HGET', job_key, 'status') == expected_status then
      redis.call('HDEL', job_key, 'next_retry_at')
      make_pending(pending_keys, job_key, job_id, now, wake_cap)
      ids[#ids + 1] = job_id
      lateness[#lateness + 1] = now - tonumber(due[i + 1])
    end
  end
  return ids, lateness
end

local scheduled_ids, scheduled_lateness = promote_from(KEYS[1], 'scheduled')
local retrying_ids, retrying_lateness = promote_from(KEYS[2], 'retrying')
return {scheduled_ids, retrying_ids, scheduled_lateness, retrying_lateness}
