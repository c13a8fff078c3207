#!lua
-- reserve_batch: tie an Idempotency-Key to the jobs (and queues) one batch request creates,
-- before they are created.
--
-- Invariant: a key names at most one request for its lifetime, a single enqueue (reserve.lua)
-- or a batch (this script); a batch's digest is domain-separated from a single one's, so a key
-- used for one never matches the other (CONFLICT). Keys span queues, so they live in the
-- global slot, and the jobs are created afterwards by one MULTI/EXEC of enqueue.lua calls in
-- their queues' slots (no script touches two slots). Crash-safe in that order: a reservation
-- whose batch was never created (the caller died in between) names job ids that enqueue.lua,
-- repeat-safe by id, creates when the same batch comes again; the transaction is all or none,
-- and a repeat of a created batch only answers its jobs.
--
-- KEYS[1] -> {ns}:v2:idem:<key>   hash {digest, job_id, jobs}; expires after the key's TTL.
--            job_id: the batch's first job, what a conflicting request (single or batch) is
--            told, as reserve.lua's own field. jobs: "<id> <queue>,<id> <queue>,..." in the
--            batch's order, at most 1,000 x 102 bytes (36-byte id, space, queue of up to 64,
--            comma): about 100 KB for the largest batch.
--
-- ARGV[1] -> digest: digest of the canonical batch (every job's queue included, in order)
-- ARGV[2] -> jobs: jobs to reserve: "<id> <queue>,..." (UUIDv4 ids chosen by the caller)
-- ARGV[3] -> ttl_ms: key TTL (ms)
--
-- Returns {DONE, jobs}: this call reserved the key for ARGV[2] (also when repeated),
--         {DUPLICATE, jobs}: the key already names the jobs of this same batch,
--         {CONFLICT, job id}: the key names a different request: its (first) job.
-- Redis commands: 1 when the key is known (HMGET), 3 when reserved (HMGET, HSET, PEXPIRE).

--- @include "codes"

local prior = redis.call('HMGET', KEYS[1], 'digest', 'job_id', 'jobs')
if prior[1] then
  if prior[1] ~= ARGV[1] then
    return {CONFLICT, prior[2]}
  end
  if prior[3] == ARGV[2] then
    return {DONE, prior[3]}
  end
  return {DUPLICATE, prior[3]}
end
local first = string.match(ARGV[2], '^[^ ]+')
redis.call('HSET', KEYS[1], 'digest', ARGV[1], 'job_id', first, 'jobs', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {DONE, ARGV[2]}
