#!lua flags=allow-oom
-- resume_queue: let workers claim from a paused queue again, and wake idle ones for its jobs.
--
-- Invariant: the queue's `paused` key is gone; its wake list then holds a hint per pending job
-- (up to the cap), so every idle worker blocked on it comes back at once. Workers that dropped
-- the queue while it was paused ask again within a second (workerd/worker.py). Resuming a
-- queue that is not paused changes nothing.
--
-- KEYS[1] -> {ns:queue}:v2:paused    string, paused since (ms)
-- KEYS[2] -> {ns:queue}:v2:pending   zset of claimable jobs
-- KEYS[3] -> {ns:queue}:v2:wake      capped list of wake-up hints
-- KEYS[4] -> {ns:queue}:v2:events    capped stream of the queue's events
--
-- ARGV[1] -> wake_cap: wake list cap
-- ARGV[2] -> events_cap: events stream cap; '0' or absent: no event
--
-- Returns {DONE, 1 when this call resumed it or 0 when it was not paused, hints pushed}.
-- Event: queue_resumed, when this call resumed it.

--- @include "codes"
--- @include "common"

if redis.call('DEL', KEYS[1]) == 0 then
  return {DONE, 0, 0}
end
emit(KEYS[4], ARGV[2], 'e', 'queue_resumed')
local wanted = math.min(redis.call('ZCARD', KEYS[2]), tonumber(ARGV[1]))
local missing = wanted - redis.call('LLEN', KEYS[3])
if missing <= 0 then
  return {DONE, 1, 0}
end
local hints = {}
for i = 1, missing do
  hints[i] = '1'
end
redis.call('LPUSH', KEYS[3], unpack(hints))
return {DONE, 1, missing}
