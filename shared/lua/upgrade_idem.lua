#!lua flags=allow-oom
-- upgrade_idem: move one v1 Idempotency-Key into layout v2's global slot, or forget it.
--
-- Invariant: a key names at most one job. v1 kept keys under its prefix, whose hash tag is the
-- namespace, the tag of v2's global keys too: both keys are in one slot. The key moves only if it
-- still names what the caller read (a v1 enqueue may have reused it since: then the caller
-- tries again later). A v2 key of the same name wins: it was made by a v2 request since, and is
-- newer. The caller moves a key only once its job lives in v2, and forgets it (ARGV[3] '') when
-- the job is gone: v1 forgot a key whose job was deleted.
--
-- KEYS[1] -> {ns}:v1:idem:<key>   hash {digest, job_id}
-- KEYS[2] -> {ns}:v2:idem:<key>   hash {digest, job_id, queue}
--
-- ARGV[1] -> the v1 digest the caller read
-- ARGV[2] -> the job id the caller read
-- ARGV[3] -> the key's v2 digest (of the job's request with its queue), or '' to forget the key
-- ARGV[4] -> the queue the job is in
--
-- Returns {DONE}: moved with its TTL (or forgotten); {DUPLICATE}: a v2 key of that name was
--         there (kept; the v1 key is deleted); {NOT_FOUND}: the v1 key is gone;
--         {WRONG_STATE}: it changed since the caller read it (left as it is).
-- Redis commands: 6 to move (HMGET, EXISTS, PTTL, HSET, PEXPIRE, DEL), 1 to 3 otherwise.

--- @include "codes"

local prior = redis.call('HMGET', KEYS[1], 'digest', 'job_id')
if not prior[1] then
  return {NOT_FOUND}
end
if prior[1] ~= ARGV[1] or prior[2] ~= ARGV[2] then
  return {WRONG_STATE}
end
if ARGV[3] ~= '' then
  if redis.call('EXISTS', KEYS[2]) == 1 then
    redis.call('DEL', KEYS[1])
    return {DUPLICATE}
  end
  local ttl = redis.call('PTTL', KEYS[1])
  redis.call('HSET', KEYS[2], 'digest', ARGV[3], 'job_id', ARGV[2], 'queue', ARGV[4])
  if ttl > 0 then
    redis.call('PEXPIRE', KEYS[2], ttl)
  end
end
redis.call('DEL', KEYS[1])
return {DONE}
