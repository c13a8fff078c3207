#!lua flags=allow-oom
-- upgrade_copy: write staged v1 jobs into layout v2's default queue, each with its hash as it
-- was, its TTL, and its entry in the index of its state with the same score.
--
-- Invariant: a job is copied at most once. A job whose v2 hash already exists was copied by an
-- earlier call (whose run stopped before dropping the staged original, or a second upgrade
-- running at once) and may have moved on in v2 since: it is left alone. Job ids are UUIDs, so
-- no other job has that id. A pending job keeps its place in line: its member keeps its v1
-- sequence number, and the v2 counter is raised past every sequence number v1 gave, so a job
-- enqueued in v2 later queues behind it.
--
-- KEYS[1] -> {ns:default}:v2:pending         zset, score -priority, member <seq>:<id>
-- KEYS[2] -> {ns:default}:v2:pending_since   zset, id -> claimable since (ms)
-- KEYS[3] -> {ns:default}:v2:seq             FIFO counter
-- KEYS[4] -> {ns:default}:v2:wake            capped list of wake-up hints
-- KEYS[5] -> {ns:default}:v2:scheduled       zset, id -> scheduled_at (ms)
-- KEYS[6] -> {ns:default}:v2:retrying        zset, id -> next_retry_at (ms)
-- KEYS[7] -> {ns:default}:v2:processing      zset, id -> lease deadline (ms)
-- KEYS[8] -> {ns:default}:v2:dead            zset, id -> time of death (ms)
-- KEYS[9] -> {ns:default}:v2:canceled        zset, id -> canceled at (ms)
-- KEYS[10] -> {ns:default}:v2:completed      zset, id -> finished_at (ms)
-- KEYS[11..n] -> {ns:default}:v2:job:<id>    one per job, in the order of the records below
--
-- ARGV[1] -> wake list cap
-- ARGV[2] -> v1's FIFO counter (the v2 counter is raised to it at least), or ''
-- ARGV[3..n] -> one record per job: id, state ('' for a job no index named), score, since
--            (ms, pending only), pending member (pending only), PTTL of the hash (ms; -1:
--            none), the number of hash fields f, then the f field, value pairs
--
-- Returns one number per job, in order: 1 when written now, 0 when its v2 hash was already there.
-- Redis commands: per job copied, 3 or 4 (EXISTS, HSET, ZADD, [PEXPIRE]), 2 more when pending
-- (ZADD pending_since, LPUSH wake); per call, GET seq and at most one SET.

--- @include "common"

local index_of = {pending = KEYS[1], scheduled = KEYS[5], retrying = KEYS[6],
  processing = KEYS[7], dead = KEYS[8], canceled = KEYS[9], completed = KEYS[10]}
local wake_cap = tonumber(ARGV[1])
local top_seq = tonumber(ARGV[2]) or 0
local copied = {}

local at = 3
for k = 11, #KEYS do
  local job_key = KEYS[k]
  local job_id, state, score, since, member = ARGV[at], ARGV[at + 1], ARGV[at + 2],
    ARGV[at + 3], ARGV[at + 4]
  local pttl, count = tonumber(ARGV[at + 5]), tonumber(ARGV[at + 6])
  local fields = {}
  for i = 1, 2 * count do
    fields[i] = ARGV[at + 6 + i]
  end
  at = at + 7 + 2 * count
  if redis.call('EXISTS', job_key) == 1 then
    copied[#copied + 1] = 0
  else
    redis.call('HSET', job_key, unpack(fields))
    if pttl > 0 then
      redis.call('PEXPIRE', job_key, pttl)
    end
    for i = 1, #fields, 2 do
      if fields[i] == 'seq' then
        top_seq = math.max(top_seq, tonumber(fields[i + 1]))
      end
    end
    if state == 'pending' then
      local separator = string.find(member, ':', 1, true)
      top_seq = math.max(top_seq, tonumber(string.sub(member, 1, separator - 1)))
      redis.call('ZADD', KEYS[1], score, member)
      redis.call('ZADD', KEYS[2], since, job_id)
      wake_one(KEYS[4], wake_cap)
    elseif state ~= '' then
      redis.call('ZADD', index_of[state], score, job_id)
    end
    copied[#copied + 1] = 1
  end
end

if top_seq > (tonumber(redis.call('GET', KEYS[3])) or 0) then
  redis.call('SET', KEYS[3], string.format('%d', top_seq))
end
return copied
