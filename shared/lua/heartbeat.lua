#!lua flags=allow-oom
-- heartbeat: record that a workerd host is alive (or that it left), for fleet-wide counts, and
-- settle whether it is quiet (claims nothing more).
--
-- Invariant: a worker record expires unless refreshed; the registry zset forgets workers
-- silent for longer than the TTL in the same step, so it never grows without bound. The
-- record's `quiet` is the state its supervisor runs with after this call: a request an API
-- call left in the record (quiet_host.lua), unless a signal set the supervisor's own state
-- since the previous heartbeat (the later word wins; the supervisor beats at once after a
-- signal). The request stays in the record until the supervisor reports the state it asked
-- for, so a repeated call (its reply lost) answers the same.
--
-- KEYS[1] -> {prefix}workers            zset, worker id -> last heartbeat (ms)
-- KEYS[2] -> {prefix}worker:<id>        hash describing the worker
--
-- ARGV[1] -> worker id
-- ARGV[2] -> TTL of the record (ms)
-- ARGV[3] -> '1' when the worker is leaving (delete its record now), else '0'
-- ARGV[4] -> now (ms) override, or '' for Redis TIME
-- ARGV[5] -> the supervisor's quiet state: '1' quiet, '0' not
-- ARGV[6] -> '1' when a signal set that state since the previous heartbeat, else '0'
-- ARGV[7..n] -> field, value pairs to store (host, pid, busy job id, …)
--
-- Returns {the number of workers heard from within the TTL, the quiet state now ('1'/'0')}.

--- @include "codes"
--- @include "common"

local ttl = tonumber(ARGV[2])
local now = now_ms(ARGV[4])
local quiet = ARGV[5]
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  -- A request stays until the supervisor's own state matches it (or a signal overrides it):
  -- a repeated call, its first reply lost, must answer the same.
  local asked = redis.call('HGET', KEYS[2], 'quiet_request')
  if asked == quiet or ARGV[6] == '1' then
    asked = false
  elseif asked then
    quiet = asked
  end
  redis.call('DEL', KEYS[2])
  if #ARGV >= 7 then
    redis.call('HSET', KEYS[2], unpack(ARGV, 7))
  end
  if asked then
    redis.call('HSET', KEYS[2], 'last_seen', now, 'quiet', quiet, 'quiet_request', asked)
  else
    redis.call('HSET', KEYS[2], 'last_seen', now, 'quiet', quiet)
  end
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('ZADD', KEYS[1], now, ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - ttl))
return {redis.call('ZCARD', KEYS[1]), quiet}
