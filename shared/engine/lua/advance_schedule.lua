#!lua flags=allow-oom
-- advance_schedule: move a periodic schedule's last tick forward to a tick, never back (an
-- atomic max), with the job that tick got and the ticks it dropped.
--
-- Invariant: `last` only grows. A scheduler enqueues a due tick's job (its id derived from the
-- schedule and the tick), then calls this; one killed in between leaves the tick due, and the
-- next pass (any host's) enqueues the same id again, which creates nothing new. A pass that lost
-- the race to another (this tick or a later one is already there) changes nothing, so the
-- counts are added once per tick whichever scheduler gets here first. A clock that went back
-- asks for a tick at or below `last`: nothing changes.
--
-- KEYS[1] -> {ns}:v2:schedule:<name>   hash: last (ms), job, job_tick (ms), jobs, missed,
--                                      paused (ms), resumed (ms)
--
-- ARGV[1] -> tick_ms: the tick (epoch ms)
-- ARGV[2] -> job_id: the job id enqueued for that tick, or '' (first sight, paused, or skipped)
-- ARGV[3] -> missed: due ticks that got no job (count, 0 or more)
-- ARGV[4] -> jobs: jobs enqueued for the ticks up to it since `last` (count, 0 or more: a pass a
--            little late enqueues each tick still on time)
--
-- Returns {DONE, 1 when `last` moved to the tick or 0 when it was there or beyond, last (ms)}.
-- Redis commands: HGET, then when it moves HSET and up to two HINCRBY (jobs, missed): 2 to 4.

--- @include "codes"

local last = redis.call('HGET', KEYS[1], 'last')
local tick = tonumber(ARGV[1])
if last and tonumber(last) >= tick then
  return {DONE, 0, tonumber(last)}
end
local stamp = string.format('%d', tick)
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[1], 'last', stamp, 'job', ARGV[2], 'job_tick', stamp)
else
  redis.call('HSET', KEYS[1], 'last', stamp)
end
if tonumber(ARGV[4]) > 0 then
  redis.call('HINCRBY', KEYS[1], 'jobs', ARGV[4])
end
if tonumber(ARGV[3]) > 0 then
  redis.call('HINCRBY', KEYS[1], 'missed', ARGV[3])
end
return {DONE, 1, tick}
