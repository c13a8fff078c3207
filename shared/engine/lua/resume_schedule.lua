#!lua flags=allow-oom
-- resume_schedule: let a paused periodic schedule enqueue again, from its next tick on.
--
-- Invariant: a resumed schedule has no `paused` field and a `resumed` time; schedulers treat
-- every tick at or before `resumed` as passed, so a pause is never caught up (not even by a
-- catch_up schedule, nor when no scheduler ran during the pause). Resuming a schedule that is
-- not paused changes nothing.
--
-- KEYS[1] -> {ns}:v2:schedules           hash, name -> definition (JSON)
-- KEYS[2] -> {ns}:v2:schedule:<name>     hash, the schedule's state
--
-- ARGV[1] -> name: the schedule's name
-- ARGV[2] -> now_ms: now (ms) override, or '' for Redis TIME
--
-- Returns {DONE, 1 when this call resumed it or 0 when it was not paused}, or {NOT_FOUND} when
-- no schedule has that name.
-- Redis commands: HEXISTS, HGET, then TIME and HSET, HDEL when it resumes: 2 to 5.

--- @include "codes"
--- @include "common"

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return {NOT_FOUND}
end
if not redis.call('HGET', KEYS[2], 'paused') then
  return {DONE, 0}
end
local now = now_ms(ARGV[2])
redis.call('HSET', KEYS[2], 'resumed', string.format('%d', now))
redis.call('HDEL', KEYS[2], 'paused')
return {DONE, 1}
