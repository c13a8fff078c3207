#!lua flags=no-writes
-- stats: jobs per state, the oldest claimable job's age, and the fleet's live and busy
-- workers, in one read: one round trip per scrape or /stats request, each part O(1) or
-- O(hosts), never a scan.
--
-- KEYS[1] -> {prefix}pending         zset (the seven state indexes, in JobState order)
-- KEYS[2] -> {prefix}scheduled       zset
-- KEYS[3] -> {prefix}processing      zset
-- KEYS[4] -> {prefix}retrying        zset
-- KEYS[5] -> {prefix}completed       zset
-- KEYS[6] -> {prefix}dead            zset
-- KEYS[7] -> {prefix}canceled        zset
-- KEYS[8] -> {prefix}pending_since   zset, id -> claimable since (ms)
-- KEYS[9] -> {prefix}workers         zset of workerd supervisors heard from recently
--
-- ARGV[1] -> worker record prefix ({prefix}worker:); records of ids read from KEYS[9] are built
--            from it, inside the same hash tag
--
-- Returns {{count per state, in KEYS order}, oldest claimable since (ms, or -1 when none),
--          now (ms, Redis TIME), hosts, live workers, busy workers}.

local counts = {
  redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]), redis.call('ZCARD', KEYS[5]), redis.call('ZCARD', KEYS[6]),
  redis.call('ZCARD', KEYS[7]),
}
local oldest = redis.call('ZRANGE', KEYS[8], 0, 0, 'WITHSCORES')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- A supervisor whose record expired (it went silent) is not counted, even before the registry
-- zset forgets its id at the next heartbeat of any host.
local hosts, live, busy = 0, 0, 0
for _, id in ipairs(redis.call('ZRANGE', KEYS[9], 0, -1)) do
  local record = redis.call('HMGET', ARGV[1] .. id, 'workers', 'busy')
  if record[1] then
    hosts = hosts + 1
    live = live + tonumber(record[1])
    busy = busy + (tonumber(record[2]) or 0)
  end
end
return {counts, oldest[2] and tonumber(oldest[2]) or -1, now, hosts, live, busy}
