#!lua flags=allow-oom
-- upgrade_detach: take v1 jobs out of layout v1's indexes into the upgrade's staging area, from
-- where shared/upgrade.py copies them into layout v2.
--
-- Invariant: a job is always in exactly one place: its v1 index and hash, the staging area, or
-- (once upgrade_copy ran) v2. Taken in one step here: the hash is renamed to the staging name,
-- so no v1 script finds it by id and no v1 index names it any more: an old process still running
-- can neither claim nor change a job while it crosses, and a v2 worker cannot see it before its
-- copy is written. RENAME keeps the hash's TTL. A processing job is taken only once its lease
-- has expired: a live lease means a v1 worker may be running it, and it finishes it in v1.
--
-- KEYS[1] -> {v1}upgrade:moving    hash, id -> "<state>|<score>|<since>|<pending member>"
-- KEYS[2] -> {v1}pending           zset, score -priority, member <seq>:<id>
-- KEYS[3] -> {v1}pending_since     zset, id -> claimable since (ms)
-- KEYS[4] -> {v1}scheduled         zset, id -> scheduled_at (ms)
-- KEYS[5] -> {v1}retrying          zset, id -> next_retry_at (ms)
-- KEYS[6] -> {v1}processing        zset, id -> lease deadline (ms)
-- KEYS[7] -> {v1}dead              zset, id -> time of death (ms)
-- KEYS[8] -> {v1}canceled          zset, id -> canceled at (ms)
-- KEYS[9] -> {v1}completed         zset, id -> finished_at (ms)
--
-- ARGV[1] -> v1 job key prefix ({v1}job:); the hashes of ids read from the indexes are built
--            from it, inside the same hash tag
-- ARGV[2] -> staging prefix ({v1}upgrade:job:), inside the same hash tag
-- ARGV[3] -> most jobs to take in this call
-- ARGV[4] -> now (ms) override, or '' for Redis TIME (which leases have expired)
-- ARGV[5..n] -> optional: ids of v1 job hashes a key scan found; each is taken as it is (state
--            '') only if no index names it, since the walk of the indexes takes the others
--
-- Returns {taken, dangling, held}: the jobs taken; the index entries whose hash was gone
--         (removed); the processing jobs left under a live lease.
-- Redis commands: per job taken, 4 (EXISTS, RENAME, HSET, ZREM), 6 from pending (ZSCORE and
-- ZREM of pending_since too); per call, TIME, a ZRANGE per state walked, and ZCOUNT; per id
-- from a key scan, EXISTS and up to 7 ZSCORE.

--- @include "common"

local job_prefix, staged_prefix, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms(ARGV[4])
local taken, dangling = 0, 0

-- Rename the job's hash into the staging area and say where it was indexed.
local function stage(job_id, state, score, since, member)
  redis.call('RENAME', job_prefix .. job_id, staged_prefix .. job_id)
  redis.call('HSET', KEYS[1], job_id, state .. '|' .. score .. '|' .. since .. '|' .. member)
  taken = taken + 1
end

-- ZRANGE answers members and scores; `entries` are {member, score} pairs flattened.
local function take(index_key, state, entries)
  for i = 1, #entries, 2 do
    local member, score = entries[i], entries[i + 1]
    local job_id, since = member, ''
    if state == 'pending' then
      job_id = string.sub(member, string.find(member, ':', 1, true) + 1)
      since = redis.call('ZSCORE', KEYS[3], job_id) or ''
      redis.call('ZREM', KEYS[3], job_id)
    end
    if redis.call('EXISTS', job_prefix .. job_id) == 1 then
      stage(job_id, state, score, since, state == 'pending' and member or '')
    else
      dangling = dangling + 1
    end
    redis.call('ZREM', index_key, member)
  end
end

-- Claimable jobs first: v2's workers are waiting for them.
local walk = {{'pending', KEYS[2]}, {'scheduled', KEYS[4]}, {'retrying', KEYS[5]},
  {'processing', KEYS[6]}, {'dead', KEYS[7]}, {'canceled', KEYS[8]}, {'completed', KEYS[9]}}
for _, entry in ipairs(walk) do
  local state, index_key = entry[1], entry[2]
  local room = limit - taken - dangling
  if room <= 0 then
    break
  end
  if state == 'processing' then
    -- A lease that ends exactly now is still held (as recover.lua counts it).
    take(index_key, state, redis.call('ZRANGEBYSCORE', index_key, '-inf', '(' .. now,
      'WITHSCORES', 'LIMIT', 0, room))
  else
    take(index_key, state, redis.call('ZRANGE', index_key, 0, room - 1, 'WITHSCORES'))
  end
end

-- Hashes outside every index (only a key scan finds them): moved as they are, unindexed.
local indexes = {KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]}
for i = 5, #ARGV do
  local job_id = ARGV[i]
  local skip = redis.call('EXISTS', job_prefix .. job_id) == 0  -- gone since the scan
  for _, index_key in ipairs(indexes) do
    skip = skip or redis.call('ZSCORE', index_key, job_id) ~= false
  end
  if not skip then
    stage(job_id, '', '', '', '')
  end
end

return {taken, dangling, redis.call('ZCOUNT', KEYS[6], now, '+inf')}
