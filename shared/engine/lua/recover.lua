#!lua flags=allow-oom
-- recover: requeue jobs whose lease expired (their worker or whole host is gone).
--
-- Invariant: losing a worker is not an application failure: the lost execution is given back
-- (attempts - 1, so it does not use up max_retries) and `recoveries` counts the loss; past
-- the recovery cap the job is dead with an error that says so (a poison pill that kills its
-- workers). The job's token moves on, so the lost worker, if
-- it was only paused, can no longer write. A job whose cancel was requested is not requeued: it
-- ends canceled (its host died before stopping it). Safe to run from several schedulers at once.
--
-- KEYS[1] -> {prefix}processing      zset, id -> lease deadline (ms)
-- KEYS[2] -> {prefix}pending         zset, score -priority, member <seq>:<id>
-- KEYS[3] -> {prefix}pending_since   zset, id -> claimable since (ms)
-- KEYS[4] -> {prefix}seq             FIFO counter
-- KEYS[5] -> {prefix}wake            capped list of wake-up hints
-- KEYS[6] -> {prefix}dead            zset, id -> time of death (ms)
-- KEYS[7] -> {prefix}reply:<request>  this call's answer, kept 15 s for a repeated call
-- KEYS[8] -> {prefix}canceled        zset, id -> canceled at (ms)
-- KEYS[9] -> {prefix}running         zset, jobs holding a limit slot (given back here)
-- KEYS[10] -> {prefix}held           zset, pending jobs a type's limit holds back
-- KEYS[11] -> {prefix}held_order     zset, the held jobs in claim order (for listings)
-- KEYS[12] -> {prefix}events         capped stream of the queue's events
--
-- ARGV[1] -> job_prefix: job key prefix ({prefix}job:); hashes of ids read from KEYS[1] are built from it
-- ARGV[2] -> limit: most jobs to recover in this call
-- ARGV[3] -> max_recoveries: recovery cap (losses allowed before the job is dead)
-- ARGV[4] -> dead_ttl_ms: TTL of a dead job's hash (ms)
-- ARGV[5] -> wake_cap: wake list cap
-- ARGV[6] -> now_ms: now (ms) override, or '' for Redis TIME
-- ARGV[7] -> canceled_ttl_ms: TTL of a canceled job's hash (ms), as cancel.lua's
-- ARGV[8] -> events_cap: events stream cap; '0' or absent: no event
--
-- Returns {requeued ids, dead ids, requeued types, dead types, canceled ids, canceled types}:
-- each types list holds the job type of the id at the same position (for per-type counters,
-- without a read per job).
-- History and event: recovered, dead past the cap, or canceled (stopped 'lost') (scheduler);
-- one XADD per job.

--- @include "codes"
--- @include "common"

local saved = remembered_reply(KEYS[7])
if saved then
  return saved
end
local prefix = ARGV[1]
local now = now_ms(ARGV[6])
local loss_keys = {KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[12], KEYS[8],
  KEYS[9], KEYS[10], KEYS[11]}
local requeued, dead, requeued_types, dead_types = {}, {}, {}, {}
local canceled, canceled_types = {}, {}

-- A lease that ends exactly now is still held: expired means deadline < now.
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now, 'LIMIT', 0, ARGV[2])
for _, job_id in ipairs(expired) do
  local job_key = prefix .. job_id
  redis.call('ZREM', KEYS[1], job_id)
  local state = redis.call('HMGET', job_key, 'status', 'type')
  if state[1] == 'processing' then
    local outcome = lose_worker(loss_keys, job_key, job_id, true, tonumber(ARGV[3]), ARGV[4],
      tonumber(ARGV[5]), now, 's', ARGV[8], 'lost', ARGV[7])
    if outcome == DEAD then
      dead[#dead + 1] = job_id
      dead_types[#dead_types + 1] = state[2]
    elseif outcome == CANCELED then
      canceled[#canceled + 1] = job_id
      canceled_types[#canceled_types + 1] = state[2]
    else
      requeued[#requeued + 1] = job_id
      requeued_types[#requeued_types + 1] = state[2]
    end
  end
end
local reply = {requeued, dead, requeued_types, dead_types, canceled, canceled_types}
if #expired > 0 then
  remember_reply(KEYS[7], reply)
end
return reply
