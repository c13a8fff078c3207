#!lua flags=allow-oom
-- pause_schedule: pause one periodic schedule: its ticks pass without jobs until resumed.
--
-- Invariant: a schedule is paused exactly while its state has a `paused` field; a scheduler
-- reads it in the same round trip as `last`, and advances `last` over a paused tick without
-- enqueueing. Pausing a paused schedule changes nothing (it keeps the time it was first
-- paused). Only a schedule some workerd published can be paused.
--
-- KEYS[1] -> {ns}:v2:schedules           hash, name -> definition (JSON)
-- KEYS[2] -> {ns}:v2:schedule:<name>     hash, the schedule's state
--
-- ARGV[1] -> name: the schedule's name
-- ARGV[2] -> now_ms: now (ms) override, or '' for Redis TIME
--
-- Returns {DONE, paused since (ms), 1 when this call paused it or 0 when it already was}, or
-- {NOT_FOUND} when no schedule has that name.
-- Redis commands: HEXISTS, HGET, then TIME and HSET when it pauses: 2 to 4.

--- @include "codes"
--- @include "common"

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return {NOT_FOUND}
end
local since = redis.call('HGET', KEYS[2], 'paused')
if since then
  return {DONE, tonumber(since), 0}
end
local now = now_ms(ARGV[2])
redis.call('HSET', KEYS[2], 'paused', string.format('%d', now))
return {DONE, now, 1}
