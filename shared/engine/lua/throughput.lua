#!lua flags=no-writes
-- throughput: one queue's completions and failed executions per minute over the last
-- `minutes` minutes, the current one included: trim.lua's minute buckets up to its watermark,
-- plus what lies after the watermark read live (so the current minute is right without
-- waiting for the next trim). Read-only; shared/read/throughput.py pipelines one call per queue.
--
-- KEYS[1] -> {ns:queue}:v2:throughput  hash, c:<epoch minute>, f:<epoch minute>, mark (ms)
-- KEYS[2] -> {ns:queue}:v2:completed   zset, id -> finished_at (ms)
-- KEYS[3] -> {ns:queue}:v2:failures    hash, second (epoch s) -> failed executions
--
-- ARGV[1] -> now_ms: now (ms) override, or '' for Redis TIME
-- ARGV[2] -> minutes: minutes to answer (1 to 60)
--
-- Returns {now (ms), first minute (epoch minute), {completed per minute}, {failed per
-- minute}}, oldest minute first.
--
-- Redis commands: TIME, one HMGET of the buckets and the mark, a ZCOUNT per minute after
-- the mark (one, or two after a minute turned; up to `minutes` before the first trim) and an
-- HMGET of the failure seconds after it (chunks of 1,000).

--- @include "common"

local MINUTE_MS = 60000
local now = now_ms(ARGV[1])
local minutes = tonumber(ARGV[2])
local last = math.floor(now / MINUTE_MS)
local first = last - minutes + 1

local fields = {'mark'}
for minute = first, last do
  fields[#fields + 1] = 'c:' .. minute
  fields[#fields + 1] = 'f:' .. minute
end
local stored = redis.call('HMGET', KEYS[1], unpack(fields))
local completed, failed = {}, {}
for i = 1, minutes do
  completed[i] = tonumber(stored[2 * i]) or 0
  failed[i] = tonumber(stored[2 * i + 1]) or 0
end

-- After the watermark (exclusive), within the window: nothing there is in a bucket yet.
local mark = math.max(tonumber(stored[1]) or 0, first * MINUTE_MS - 1)
for minute = math.floor((mark + 1) / MINUTE_MS), last do
  local low = math.max(mark, minute * MINUTE_MS - 1)
  local high = math.min(now, (minute + 1) * MINUTE_MS - 1)
  if high > low then
    local i = minute - first + 1
    completed[i] = completed[i] + redis.call('ZCOUNT', KEYS[2], '(' .. low, high)
  end
end
-- A failure second after the mark; the current second counts (its failures so far).
each_failure_second(KEYS[3], math.floor(mark / 1000) + 1, math.floor(now / 1000),
  function(second, failures)
    local at = math.floor(second / 60) - first + 1
    failed[at] = failed[at] + failures
  end)
return {now, first, completed, failed}
