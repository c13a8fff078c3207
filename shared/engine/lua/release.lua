#!lua flags=allow-oom
-- release: requeue one job whose worker is known to be gone, at once (not after the lease).
--
-- Invariant: as recover.lua, for one job named with the token its worker held: a crash counts
-- a recovery (dead past the cap); a graceful drain counts nothing. A token that is no longer
-- current changes nothing (the job was already recovered, or re-claimed by another worker). A
-- repeated call with the same request id returns the first call's outcome. A job whose cancel
-- was requested ends canceled instead (lose_worker in common.lua).
--
-- KEYS[1] -> {prefix}job:<id>
-- KEYS[2] -> {prefix}processing      zset, id -> lease deadline (ms)
-- KEYS[3] -> {prefix}pending         zset, score -priority, member <seq>:<id>
-- KEYS[4] -> {prefix}pending_since   zset, id -> claimable since (ms)
-- KEYS[5] -> {prefix}seq             FIFO counter
-- KEYS[6] -> {prefix}wake            capped list of wake-up hints
-- KEYS[7] -> {prefix}dead            zset, id -> time of death (ms)
-- KEYS[8] -> {prefix}canceled        zset, id -> canceled at (ms)
-- KEYS[9] -> {prefix}running         zset, jobs holding a limit slot (given back here)
-- KEYS[10] -> {prefix}held           zset, pending jobs a type's limit holds back
-- KEYS[11] -> {prefix}held_order     zset, the held jobs in claim order (for listings)
-- KEYS[12] -> {prefix}events         capped stream of the queue's events
--
-- ARGV[1] -> token: fencing token the lost worker held
-- ARGV[2] -> mode: 'crash' (counts a recovery), 'drain' (counts nothing) or 'cancel' (the supervisor
--            killed its worker to stop the job: as a crash; the canceled job's history says
--            sigkill)
-- ARGV[3] -> max_recoveries: recovery cap
-- ARGV[4] -> dead_ttl_ms: TTL of a dead job's hash (ms)
-- ARGV[5] -> wake_cap: wake list cap
-- ARGV[6] -> request_id: request id
-- ARGV[7] -> now_ms: now (ms) override, or '' for Redis TIME
-- ARGV[8] -> actor: who releases it, history's actor letter: 'w' the worker itself (a job it claimed
--            and will not run: it is stopping), 'v' the supervisor
-- ARGV[9] -> canceled_ttl_ms: TTL of a canceled job's hash (ms), as cancel.lua's
-- ARGV[10] -> events_cap: events stream cap; '0' or absent: no event
--
-- Returns {DONE, type} (requeued), {DEAD, type}, {CANCELED, type}, {NOT_FOUND}, or
-- {STALE_TOKEN, current status}.
-- History and event: released (a drain), recovered (a crash), dead past the cap, or canceled
-- (stopped 'sigkill' after a 'cancel', else 'lost'); a repeat writes neither.

--- @include "codes"
--- @include "common"

local state = redis.call('HMGET', KEYS[1], 'status', 'token', 'id', 'last_request', 'type')
if not state[1] then
  return {NOT_FOUND}
end
if state[4] == ARGV[6] then
  local codes = {dead = DEAD, canceled = CANCELED}
  return {codes[state[1]] or DONE, state[5]}
end
if state[1] ~= 'processing' or state[2] ~= ARGV[1] then
  return {STALE_TOKEN, state[1]}
end

local now = now_ms(ARGV[7])
redis.call('ZREM', KEYS[2], state[3])
redis.call('HSET', KEYS[1], 'last_request', ARGV[6])
local outcome = lose_worker({KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[12], KEYS[8],
  KEYS[9], KEYS[10], KEYS[11]}, KEYS[1], state[3], ARGV[2] ~= 'drain', tonumber(ARGV[3]),
  ARGV[4], tonumber(ARGV[5]), now, ARGV[8], ARGV[10],
  ARGV[2] == 'cancel' and 'sigkill' or 'lost', ARGV[9])
return {outcome, state[5]}
