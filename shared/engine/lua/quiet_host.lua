#!lua flags=allow-oom
-- quiet_host: ask one workerd host to claim nothing more (quiet) or to claim again (resume).
--
-- Invariant: a request lands only in the record of a live host (one whose record has not
-- expired), as its `quiet_request` field; the host's next registry heartbeat (heartbeat.lua)
-- applies it, writes the state it applied as `quiet`, and clears the request. A record is
-- never created here, so a name no host has leaves nothing behind.
--
-- KEYS[1] -> {ns}:v2:worker:<name>   hash, the host's registry record (global slot)
--
-- ARGV[1] -> quiet: '1' to quiet the host, '0' to resume it
--
-- Returns {DONE, the quiet state the host last applied ('1', '0', or false before any)}, or
--         {NOT_FOUND} when no live host has that name.

--- @include "codes"

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {NOT_FOUND}
end
local applied = redis.call('HGET', KEYS[1], 'quiet')
redis.call('HSET', KEYS[1], 'quiet_request', ARGV[1])
return {DONE, applied}
