#!lua flags=allow-oom
-- claim: pop the best pending job and start it, in one step.
--
-- Invariant: a job leaves `pending` only by becoming `processing` with attempts+1, started_at,
-- the worker's id, a lease deadline in `processing` and a fresh fencing token, all at once.
-- Were the pop and the metadata update two steps, a worker dying between them would leave a
-- job out of `pending` but still marked pending, where no recovery looks for it.
-- Best = highest priority, then lowest sequence (FIFO). A repeated call with the same request
-- id (a reply lost and retried) returns the job that request already claimed instead of
-- claiming a second one. The job keeps its `seq` field: if its worker is lost it goes back to
-- the same place in line.
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
--- @include "claim"

local job = claim_next(KEYS, ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], now_ms(ARGV[5]))
if job then
  return {DONE, job}
end
return {EMPTY}
