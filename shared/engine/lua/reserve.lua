#!lua
-- reserve: tie an Idempotency-Key to the job (and queue) one request creates, before it is
-- created.
--
-- Invariant: a key names at most one job for its lifetime. Keys span queues, so they live in
-- the global slot, and the job is created by enqueue.lua in its queue's slot afterwards (no
-- script touches two slots). Crash-safe in that order: a reservation whose job was never
-- created (the caller died in between) names a job id that enqueue.lua, repeat-safe by id,
-- creates when the same request comes again. A key that reserve_batch.lua holds for a batch
-- has a batch's digest, never a single request's: CONFLICT, naming the batch's first job.
--
-- KEYS[1] -> {ns}:v2:idem:<key>   hash {digest, job_id, queue}; expires after the key's TTL
--
-- ARGV[1] -> digest: digest of the canonical request (its queue included)
-- ARGV[2] -> job_id: job id to reserve (UUIDv4, chosen by the caller)
-- ARGV[3] -> queue: queue the job goes to
-- ARGV[4] -> ttl_ms: key TTL (ms)
--
-- Returns {DONE, job id, queue}: this call reserved the key for ARGV[2] (also when repeated),
--         {DUPLICATE, job id, queue}: the key already names a job for this same request,
--         {CONFLICT, job id}: the key names a job for a different request.
-- Redis commands: 1 when the key is known (HMGET), 3 when reserved (HMGET, HSET, PEXPIRE).

--- @include "codes"

local prior = redis.call('HMGET', KEYS[1], 'digest', 'job_id', 'queue')
if prior[1] then
  if prior[1] ~= ARGV[1] then
    return {CONFLICT, prior[2]}
  end
  if prior[2] == ARGV[2] then
    return {DONE, prior[2], prior[3]}
  end
  return {DUPLICATE, prior[2], prior[3]}
end
redis.call('HSET', KEYS[1], 'digest', ARGV[1], 'job_id', ARGV[2], 'queue', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {DONE, ARGV[2], ARGV[3]}
