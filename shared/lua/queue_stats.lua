#!lua flags=no-writes
-- queue_stats: one queue's jobs per state and its oldest claimable job's age, in one read: one
-- round trip per queue per scrape or /stats request (pipelined), each part O(1).
--
-- KEYS[1] -> {ns:queue}:v2:pending         zset (the seven state indexes, in JobState order)
-- KEYS[2] -> {ns:queue}:v2:scheduled       zset
-- KEYS[3] -> {ns:queue}:v2:processing      zset
-- KEYS[4] -> {ns:queue}:v2:retrying        zset
-- KEYS[5] -> {ns:queue}:v2:completed       zset
-- KEYS[6] -> {ns:queue}:v2:dead            zset
-- KEYS[7] -> {ns:queue}:v2:canceled        zset
-- KEYS[8] -> {ns:queue}:v2:pending_since   zset, id -> claimable since (ms)
--
-- Returns {{count per state, in KEYS order}, oldest claimable since (ms, or -1 when none),
--          now (ms, Redis TIME)}.

local counts = {
  redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]), redis.call('ZCARD', KEYS[5]), redis.call('ZCARD', KEYS[6]),
  redis.call('ZCARD', KEYS[7]),
}
local oldest = redis.call('ZRANGE', KEYS[8], 0, 0, 'WITHSCORES')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {counts, oldest[2] and tonumber(oldest[2]) or -1, now}
