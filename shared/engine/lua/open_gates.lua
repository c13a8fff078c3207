#!lua flags=allow-oom
-- open_gates: let jobs held by a rate limit go once their scope's tokens are back (the
-- scheduler's promote pass runs it for a queue with a gate; docs/QUEUES.md, "Concurrency and
-- rate limits").
--
-- Invariant: a gate is a rate-limit scope out of tokens, scored by when its next token is due
-- (claim.lua closes it). Due, it opens: a type's held jobs, no more than its whole tokens, go
-- back to pending in their place with a wake-up hint each (the gate closes again for the next
-- token when more are held); the queue's own scope (its claims answered EMPTY) gets a hint per
-- token. A scope whose limit is gone just opens. Safe to run
-- from several schedulers at once: each gate is removed, and each held job moved, once.
--
-- KEYS[1] -> {prefix}gates         zset, scope ('q', 't:<type>') -> next token due (ms)
-- KEYS[2] -> {prefix}limits        string, the queue's limits as JSON
-- KEYS[3] -> {prefix}buckets       hash, scope -> '<tokens>|<refilled at ms>'
-- KEYS[4] -> {prefix}held          zset, pending jobs a type's limit holds back
-- KEYS[5] -> {prefix}pending       zset, score -priority, member <seq>:<id>
-- KEYS[6] -> {prefix}wake          capped list of wake-up hints
-- KEYS[7] -> {prefix}held_order    zset, the held jobs in claim order (for listings)
--
-- ARGV[1] -> now_ms: now (ms) override, or '' for Redis TIME
-- ARGV[2] -> wake_cap: wake-up hint cap
-- ARGV[3] -> limit: most gates to open in this call
--
-- Returns the number of held jobs returned to pending.

--- @include "codes"
--- @include "common"

local now = now_ms(ARGV[1])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, ARGV[3])
if #due == 0 then
  return 0
end
local raw = redis.call('GET', KEYS[2])
local limits = raw and cjson.decode(raw) or {}
local lk = limited({buckets = KEYS[3], held = KEYS[4], order = KEYS[7], pending = KEYS[5],
  gates = KEYS[1]})
local wake_cap, moved = tonumber(ARGV[2]), 0
for _, scope in ipairs(due) do
  redis.call('ZREM', KEYS[1], scope)
  local job_type = scope ~= 'q' and string.sub(scope, 3)
  local rate = limits.r
  if job_type then
    rate = limits.t and limits.t[job_type] and limits.t[job_type].r
  end
  if rate then
    local tokens = lk:bucket_tokens(scope, rate, now)
    if tokens < 1 then
      lk:gate_close(scope, rate, tokens, now)
    elseif not job_type then
      for _ = 1, math.min(math.floor(tokens), wake_cap) do
        wake_one(KEYS[6], wake_cap)
      end
    else
      local whole = math.floor(tokens)
      local entries = redis.call('ZRANGEBYLEX', KEYS[4], '[' .. job_type .. '|',
        '(' .. job_type .. '}', 'LIMIT', 0, whole + 1)
      for i = 1, math.min(whole, #entries) do
        lk:unhold(entries[i])
        wake_one(KEYS[6], wake_cap)
      end
      -- More held than tokens: no claim will meet them to close the gate again, so this does,
      -- for when the token after those just spent is due.
      if #entries > whole then
        lk:gate_close(scope, rate, tokens - whole, now)
      end
      moved = moved + math.min(whole, #entries)
    end
  end
end
return moved
