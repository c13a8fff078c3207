#!lua flags=allow-oom
-- pause_queue: pause one queue: from now on no claim takes a job from it, until resume_queue.
--
-- Invariant: a queue is paused exactly while its `paused` key exists; claim.lua and the claim
-- part of complete.lua read it in the same step as the pop, so no job is claimed from a paused
-- queue, not even by a worker that has not heard of the pause yet. Jobs still arrive (enqueue)
-- and become pending (promote, recover): a pause holds work back, it never refuses it.
-- Pausing a paused queue changes nothing (it keeps the time it was first paused).
--
-- KEYS[1] -> {ns:queue}:v2:paused   string, paused since (ms)
-- KEYS[2] -> {ns:queue}:v2:events   capped stream of the queue's events
--
-- ARGV[1] -> now_ms: now (ms) override, or '' for Redis TIME
-- ARGV[2] -> events_cap: events stream cap; '0' or absent: no event
--
-- Returns {DONE, paused since (ms), 1 when this call paused it or 0 when it already was}.
-- Event: queue_paused, when this call paused it.

--- @include "codes"
--- @include "common"

local since = redis.call('GET', KEYS[1])
if since then
  return {DONE, tonumber(since), 0}
end
local now = now_ms(ARGV[1])
redis.call('SET', KEYS[1], string.format('%d', now))
emit(KEYS[2], ARGV[2], 'e', 'queue_paused')
return {DONE, now, 1}
