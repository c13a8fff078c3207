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
-- KEYS[3] -> {prefix}events             capped stream of host events (global slot)
--
-- ARGV[1] -> worker_id: worker id (the host's registry name)
-- ARGV[2] -> ttl_ms: TTL of the record (ms)
-- ARGV[3] -> leaving: '1' when the worker is leaving (delete its record now), else '0'
-- ARGV[4] -> now_ms: now (ms) override, or '' for Redis TIME
-- ARGV[5] -> quiet: the supervisor's quiet state: '1' quiet, '0' not
-- ARGV[6] -> quiet_by_signal: '1' when a signal set that state since the previous heartbeat, else '0'
-- ARGV[7] -> events_cap: events stream cap; '0': no event
-- ARGV[8..n] -> fields: field, value pairs to store (host, pid, busy job id, …)
--
-- Returns {the number of workers heard from within the TTL, the quiet state now ('1'/'0')}.
-- Events (docs/EVENTS.md), each with h = the host's registry name: worker_joined when the
-- registry gains this host (its ZADD adds a member); worker_quiet or worker_resumed when the
-- record's quiet state changes (a host that joins quiet says so); worker_left when it leaves
-- (ARGV[3]) and for every host the registry forgets for silence.
-- Redis commands: 9 for a beat of a known host that sends fields (TIME, HMGET, DEL, HSET,
-- HSET, PEXPIRE, ZADD, ZRANGEBYSCORE, ZCARD), one XADD more per event; with hosts to forget, a
-- ZREMRANGEBYSCORE more. With events off, ZREMRANGEBYSCORE in the read's place, and no XADD.

--- @include "codes"
--- @include "common"

local ttl = tonumber(ARGV[2])
local now = now_ms(ARGV[4])
local quiet = ARGV[5]
local events, cap, host = KEYS[3], ARGV[7], ARGV[1]
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[2])
  if redis.call('ZREM', KEYS[1], host) == 1 then
    emit(events, cap, 'e', 'worker_left', 'h', host)
  end
else
  -- A request stays until the supervisor's own state matches it (or a signal overrides it):
  -- a repeated call, its first reply lost, must answer the same. The state the record held
  -- (read in the same HMGET) tells whether this beat changes it.
  local record = redis.call('HMGET', KEYS[2], 'quiet_request', 'quiet')
  local asked, was_quiet = record[1], record[2] or '0'
  if asked == quiet or ARGV[6] == '1' then
    asked = false
  elseif asked then
    quiet = asked
  end
  redis.call('DEL', KEYS[2])
  if #ARGV >= 8 then
    redis.call('HSET', KEYS[2], unpack(ARGV, 8))
  end
  if asked then
    redis.call('HSET', KEYS[2], 'last_seen', now, 'quiet', quiet, 'quiet_request', asked)
  else
    redis.call('HSET', KEYS[2], 'last_seen', now, 'quiet', quiet)
  end
  redis.call('PEXPIRE', KEYS[2], ttl)
  if redis.call('ZADD', KEYS[1], now, host) == 1 then
    emit(events, cap, 'e', 'worker_joined', 'h', host)
  end
  if quiet ~= was_quiet then
    emit(events, cap, 'e', quiet == '1' and 'worker_quiet' or 'worker_resumed', 'h', host)
  end
end
local silent = '(' .. (now - ttl)
if not events_on(cap) then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', silent)
else
  -- The hosts forgotten are read first, to name them; the removal only when there are any, so
  -- a beat with none costs what it did without events.
  local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', silent)
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', silent)
    for _, name in ipairs(gone) do
      emit(events, cap, 'e', 'worker_left', 'h', name)
    end
  end
end
return {redis.call('ZCARD', KEYS[1]), quiet}
