#!lua flags=allow-oom
-- complete: record a job's success and its result; optionally claim the worker's next job in
-- the same step (one round trip per job on a busy worker).
--
-- Invariant: only the worker holding the current fencing token completes a processing job;
-- the job leaves `processing` and enters `completed` in the same step. A repeated call with the
-- same token (reply lost, retried) answers DONE again and changes nothing more; its claim part
-- returns the job that request already claimed (see claim.lua). Nothing is claimed when the
-- completion itself is refused.
--
-- KEYS[1] -> {prefix}job:<id>
-- KEYS[2] -> {prefix}processing       zset, id -> lease deadline (ms)
-- KEYS[3] -> {prefix}completed        zset, id -> finished_at (ms); trimmed by trim.lua
-- KEYS[4] -> {prefix}pending          zset, score -priority, member <seq>:<id>   (claim only)
-- KEYS[5] -> {prefix}pending_since    zset, id -> claimable since (ms)           (claim only)
-- KEYS[6] -> {prefix}claim:<worker>   string "<request id>|<job id>"             (claim only)
--
-- ARGV[1] -> fencing token
-- ARGV[2] -> result (JSON text)
-- ARGV[3] -> TTL of the job hash (ms): retention plus a margin, a backstop behind trim.lua
-- ARGV[4] -> now (ms) override, or '' for Redis TIME
-- ARGV[5] -> job key prefix ({prefix}job:) for the claimed job, as in claim.lua  (claim only)
-- ARGV[6] -> worker id claiming its next job, or '' to claim nothing
-- ARGV[7] -> lease length (ms)                                                    (claim only)
-- ARGV[8] -> claim request id                                                     (claim only)
--
-- Returns {DONE} or {DONE, HGETALL of the next job}, {NOT_FOUND}, or
--         {STALE_TOKEN, current status}.

--- @include "codes"
--- @include "common"
--- @include "claim"

local state = redis.call('HMGET', KEYS[1], 'status', 'token', 'id')
if not state[1] then
  return {NOT_FOUND}
end
if state[2] ~= ARGV[1] then
  return {STALE_TOKEN, state[1]}
end
local now = now_ms(ARGV[4])
if state[1] == 'processing' then
  redis.call('HSET', KEYS[1], 'status', 'completed', 'result', ARGV[2], 'finished_at', now,
    'updated_at', now)
  redis.call('ZREM', KEYS[2], state[3])
  redis.call('ZADD', KEYS[3], now, state[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
elseif state[1] ~= 'completed' then
  return {STALE_TOKEN, state[1]}
end

if ARGV[6] ~= '' then
  local job = claim_next({KEYS[4], KEYS[5], KEYS[2], KEYS[6]}, ARGV[5], ARGV[6],
    tonumber(ARGV[7]), ARGV[8], now)
  if job then
    return {DONE, job}
  end
end
return {DONE}
