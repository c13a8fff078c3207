#!lua flags=allow-oom
-- publish_schedules: replace the published definitions of the periodic schedules with one
-- workerd's file, whole.
--
-- Invariant: the definitions are exactly one file's (the last workerd to start with one);
-- every host is meant to run the same file (docs/SCHEDULES.md). A schedule's state (last tick,
-- paused) is a key of its own and is kept, so a schedule that leaves the file and comes back
-- resumes where it was.
--
-- KEYS[1] -> {ns}:v2:schedules   hash, name -> definition (JSON)
--
-- ARGV[1..n] -> definitions: pairs: a schedule's name, then its definition (JSON); none: no schedule
--
-- Returns {DONE, number of schedules published}.
-- Redis commands: DEL, and one HSET when there is any schedule: 1 or 2.

--- @include "codes"

redis.call('DEL', KEYS[1])
if #ARGV > 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV))
end
return {DONE, #ARGV / 2}
