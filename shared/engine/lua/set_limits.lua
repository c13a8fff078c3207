#!lua flags=allow-oom
-- set_limits: replace a queue's concurrency and rate limits, or clear them (docs/QUEUES.md,
-- "Concurrency and rate limits"; the keys as includes/common.lua describes them).
--
-- Invariant: `running` holds every processing job a concurrency limit may count, each marked
-- with the token it holds (`slot`), so every exit gives its slot back: every change counts
-- the jobs already running that hold no slot yet, from `processing` (one entry per running
-- job, so about one per live worker), so a limit set while they run counts them. Every held
-- job goes back to pending, in its place, whatever changed: a claim holds again whatever its
-- type's new limit still holds (once, O(1) each), so no job can stay held by a limit that is
-- gone. Cleared, the slot and gate keys go; the token buckets go
-- with the limits (a rate set again starts full).
--
-- KEYS[1] -> {prefix}limits        string, the limits as JSON (absent: none)
-- KEYS[2] -> {prefix}running       zset, <type>|<id> of each job holding a slot
-- KEYS[3] -> {prefix}held          zset, pending jobs a type's limit holds back
-- KEYS[4] -> {prefix}processing    zset, id -> lease deadline (ms)
-- KEYS[5] -> {prefix}pending       zset, score -priority, member <seq>:<id>
-- KEYS[6] -> {prefix}wake          capped list of wake-up hints
-- KEYS[7] -> {prefix}gates         zset, rate-limit scope -> next token due (ms)
-- KEYS[8] -> {prefix}buckets       hash, rate-limit scope -> tokens
-- KEYS[9] -> {prefix}held_order    zset, the held jobs in claim order (for listings)
--
-- ARGV[1] -> limits_json: the limits as JSON ({"c": n, "r": [n, period ms], "t": {...}}), '' to clear
-- ARGV[2] -> job_prefix: job key prefix ({prefix}job:); hashes of ids read from KEYS[4] are built from it
-- ARGV[3] -> wake_cap: wake-up hint cap
-- ARGV[4] -> expected: the limits the caller read before changing one scope ('' for none), or '*' to
--            replace whatever is there: a change of one type's limit is a read, then this
--            call, and two at once must not lose one (compare and set)
--
-- Returns {DONE, running jobs given a slot, held jobs returned to pending}, or {CONFLICT} when
-- the limits are no longer ARGV[4] (nothing changed).
-- Redis commands: GET, SET or DEL, ZRANGE of held, ZREM x2 + ZADD + LPUSH per held job; set:
-- ZRANGE of processing, HMGET per running job (+ ZADD, HSET for one without a slot).

--- @include "codes"
--- @include "common"

local before = redis.call('GET', KEYS[1])
if ARGV[4] ~= '*' and ARGV[4] ~= (before or '') then
  return {CONFLICT}
end
local counted = 0
if ARGV[1] == '' then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[7], KEYS[8])
else
  redis.call('SET', KEYS[1], ARGV[1])
  for _, job_id in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
    local job_key = ARGV[2] .. job_id
    local job = redis.call('HMGET', job_key, 'status', 'type', 'token', 'slot')
    if job[1] == 'processing' and job[4] ~= job[3] then
      redis.call('ZADD', KEYS[2], 0, (job[2] or '') .. '|' .. job_id)
      redis.call('HSET', job_key, 'slot', job[3])
      counted = counted + 1
    end
  end
end
local lk = limited({held = KEYS[3], order = KEYS[9], pending = KEYS[5]})
local entries = redis.call('ZRANGE', KEYS[3], 0, -1)
for _, entry in ipairs(entries) do
  lk:unhold(entry)
  wake_one(KEYS[6], tonumber(ARGV[3]))
end
redis.call('DEL', KEYS[7])
return {DONE, counted, #entries}
