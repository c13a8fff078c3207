#!lua flags=allow-oom
-- renew: extend the leases of running jobs, many per call (the supervisor's tick).
--
-- Invariant: only the holder of a job's current fencing token can extend its lease, and only
-- while the job is processing (a processing job always has a lease: a missing entry, which
-- only a hand edit can cause, is written back rather than left unrecoverable).
--
-- KEYS[1]    -> {prefix}processing   zset, id -> lease deadline (ms)
-- KEYS[2..n] -> jobs: {prefix}job:<id>     the jobs whose leases to extend
--
-- ARGV[1]    -> lease_ms: lease length (ms), counted from now
-- ARGV[2]    -> now_ms: now (ms) override, or '' for Redis TIME
-- ARGV[3..n] -> tokens: fencing token for KEYS[2..n], in the same order
--
-- Returns one entry per job, in order: DONE (extended); CANCEL_ASKED (extended, and a cancel of
-- the job was requested: the supervisor stops its worker, so it learns of a request within one
-- renewal and at no command of its own); WRONG_STATE (the token's holder already
-- finished the job: nothing to renew, nothing lost); STALE_TOKEN or NOT_FOUND (lease lost: the
-- job was recovered or re-claimed since; its worker must stop).

--- @include "codes"
--- @include "common"

local deadline = now_ms(ARGV[2]) + tonumber(ARGV[1])
local results = {}
for i = 2, #KEYS do
  local state = redis.call('HMGET', KEYS[i], 'status', 'token', 'id', 'cancel_requested_at')
  if not state[1] then
    results[#results + 1] = NOT_FOUND
  elseif state[2] ~= ARGV[i + 1] then
    results[#results + 1] = STALE_TOKEN
  elseif state[1] == 'processing' then
    redis.call('ZADD', KEYS[1], deadline, state[3])
    results[#results + 1] = state[4] and CANCEL_ASKED or DONE
  else
    results[#results + 1] = WRONG_STATE
  end
end
return results
