#!lua flags=allow-oom
-- delete_queue: delete an empty queue's keys (its finished jobs and events with them), or say
-- why it is not empty.
--
-- Invariant: a queue is deleted only when it holds no pending, held, scheduled, retrying,
-- processing or dead job and is neither paused nor limited, all read in the step that deletes,
-- so a job enqueued before it is never lost and one enqueued after it finds no FIFO counter
-- (enqueue.lua then reports the queue's first job, and its caller lists the queue again).
-- The queue's completed and canceled jobs go with it (their hashes: built from the prefix in
-- ARGV, ids read from the indexes in this slot), and its events stream, counters and buckets.
-- With ARGV[2] '0' nothing is deleted: the same check, as a read.
--
-- KEYS[1] -> {ns:queue}:v2:pending        zset of claimable jobs
-- KEYS[2] -> {ns:queue}:v2:held           zset of jobs held back by a limit
-- KEYS[3] -> {ns:queue}:v2:scheduled      zset of jobs waiting for their time
-- KEYS[4] -> {ns:queue}:v2:retrying       zset of jobs waiting out their backoff
-- KEYS[5] -> {ns:queue}:v2:processing     zset of running jobs
-- KEYS[6] -> {ns:queue}:v2:dead           the dead-letter queue
-- KEYS[7] -> {ns:queue}:v2:paused         flag: the queue is paused
-- KEYS[8] -> {ns:queue}:v2:limits         the queue's limits (JSON)
-- KEYS[9] -> {ns:queue}:v2:completed      zset of completed job ids (their hashes deleted too)
-- KEYS[10] -> {ns:queue}:v2:canceled      zset of canceled job ids (their hashes deleted too)
-- KEYS[11..n] -> others: the queue's other keys, deleted (seq, pending_since, wake, events, …)
--
-- ARGV[1] -> job_prefix: the queue's job key prefix, {ns:queue}:v2:job:
-- ARGV[2] -> delete: '1': delete when empty; '0': only check
--
-- Returns {DONE, deleted}: the queue is empty (deleted: 1 when this call deleted its keys, 0
--         for a check); or {WRONG_STATE, pending, held, scheduled, retrying, processing, dead,
--         paused, limited}: the counts that keep it, and 1/0 for paused and limited.
-- Redis commands: 8 reads; deleting, a ZCARD of each finished index, one ZRANGE and one UNLINK per
-- 500 finished jobs, and one UNLINK of the queue's keys (UNLINK frees memory off the main thread).

--- @include "codes"

local counts = {}
for i = 1, 6 do
  counts[i] = redis.call('ZCARD', KEYS[i])
end
counts[7] = redis.call('EXISTS', KEYS[7])
counts[8] = redis.call('EXISTS', KEYS[8])
for i = 1, 8 do
  if counts[i] > 0 then
    return {WRONG_STATE, unpack(counts)}
  end
end
if ARGV[2] ~= '1' then
  return {DONE, 0}
end

local chunk = 500
for index = 9, 10 do
  local total = redis.call('ZCARD', KEYS[index])
  for start = 0, total - 1, chunk do
    local ids = redis.call('ZRANGE', KEYS[index], start, start + chunk - 1)
    local hashes = {}
    for i, id in ipairs(ids) do
      hashes[i] = ARGV[1] .. id
    end
    if #hashes > 0 then
      redis.call('UNLINK', unpack(hashes))
    end
  end
end
local rest = {KEYS[9], KEYS[10]}
for i = 11, #KEYS do
  rest[#rest + 1] = KEYS[i]
end
redis.call('UNLINK', unpack(rest))
return {DONE, 1}
