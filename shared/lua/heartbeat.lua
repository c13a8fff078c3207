#!lua flags=allow-oom
-- heartbeat: record that a worker process is alive (or that it left), for fleet-wide counts.
--
-- Invariant: a worker record expires unless refreshed; the registry zset forgets workers
-- silent for longer than the TTL in the same step, so it never grows without bound.
--
-- KEYS[1] -> {prefix}workers            zset, worker id -> last heartbeat (ms)
-- KEYS[2] -> {prefix}worker:<id>        hash describing the worker
--
-- ARGV[1] -> worker id
-- ARGV[2] -> TTL of the record (ms)
-- ARGV[3] -> '1' when the worker is leaving (delete its record now), else '0'
-- ARGV[4] -> now (ms) override, or '' for Redis TIME
-- ARGV[5..n] -> field, value pairs to store (host, pid, busy job id, …)
--
-- Returns the number of workers heard from within the TTL.

--- @include "codes"
--- @include "common"

local ttl = tonumber(ARGV[2])
local now = now_ms(ARGV[4])
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('DEL', KEYS[2])
  if #ARGV >= 5 then
    redis.call('HSET', KEYS[2], unpack(ARGV, 5))
  end
  redis.call('HSET', KEYS[2], 'last_seen', now)
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('ZADD', KEYS[1], now, ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - ttl))
return redis.call('ZCARD', KEYS[1])
