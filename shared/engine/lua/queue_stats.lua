#!lua flags=no-writes
-- queue_stats: one queue's jobs per state, its oldest claimable job's age, whether it is paused
-- and what finished in the last minute, in one read: one round trip per queue per scrape,
-- /stats or /queues request (pipelined), each part O(1) or O(log n).
--
-- "Completed in the last minute" counts the completed index by finish time (so a job already
-- trimmed away by the count cap is not counted); "failed" sums fail.lua's per-second counts
-- over the last 60 seconds, the current one included: every failed execution, retried or
-- dead; not a job lost with its worker (requeued, or dead at the recovery cap).
--
-- KEYS[1] -> {ns:queue}:v2:pending         zset (the seven state indexes, in JobState order)
-- KEYS[2] -> {ns:queue}:v2:scheduled       zset
-- KEYS[3] -> {ns:queue}:v2:processing      zset
-- KEYS[4] -> {ns:queue}:v2:retrying        zset
-- KEYS[5] -> {ns:queue}:v2:completed       zset, id -> finished_at (ms)
-- KEYS[6] -> {ns:queue}:v2:dead            zset
-- KEYS[7] -> {ns:queue}:v2:canceled        zset
-- KEYS[8] -> {ns:queue}:v2:pending_since   zset, id -> claimable since (ms)
-- KEYS[9] -> {ns:queue}:v2:paused          string, paused since (ms), present while paused
-- KEYS[10] -> {ns:queue}:v2:failures       hash, second (epoch s) -> failed executions
-- KEYS[11] -> {ns:queue}:v2:held           zset, pending jobs a type's limit holds back: they
--                                           are pending, counted with KEYS[1]
--
-- ARGV[1] -> now_ms: now (ms) override, or '' for Redis TIME
--
-- Returns {{count per state, in KEYS order}, oldest claimable since (ms, or -1 when none),
--          now (ms, Redis TIME), paused since (ms, or -1 when not paused), completed in the
--          last 60 s, failed in the last 60 s}.

--- @include "common"

local counts = {
  redis.call('ZCARD', KEYS[1]) + redis.call('ZCARD', KEYS[11]), redis.call('ZCARD', KEYS[2]),
  redis.call('ZCARD', KEYS[3]), redis.call('ZCARD', KEYS[4]), redis.call('ZCARD', KEYS[5]),
  redis.call('ZCARD', KEYS[6]), redis.call('ZCARD', KEYS[7]),
}
local oldest = redis.call('ZRANGE', KEYS[8], 0, 0, 'WITHSCORES')
local now = now_ms(ARGV[1])
local paused = redis.call('GET', KEYS[9])
local completed = redis.call('ZCOUNT', KEYS[5], '(' .. (now - 60000), '+inf')
local second = math.floor(now / 1000)
local seconds = {}
for i = 0, 59 do
  seconds[i + 1] = tostring(second - i)
end
local failed = 0
for _, n in ipairs(redis.call('HMGET', KEYS[10], unpack(seconds))) do
  failed = failed + (tonumber(n) or 0)
end
return {counts, oldest[2] and tonumber(oldest[2]) or -1, now, paused and tonumber(paused) or -1,
  completed, failed}
