#!lua flags=allow-oom
-- release_worker: requeue at once whatever job a dead worker still holds, found by its worker
-- id (it may hold a job its supervisor never learned of: it died inside a claim, or inside the
-- complete that claimed its next job).
--
-- Invariant: as release.lua for each job still `processing` under that worker id, where the
-- mode applies to the job its slot showed running (`running_job`) only: a crash counts a recovery
-- (dead past the cap), a drain counts nothing, and so does an isolate, which also marks the
-- job to run alone in its next worker process (`alone` = 1 in its hash, kept: its threaded
-- worker died with other jobs running, and nobody can tell which one killed it; alone, its
-- next death is its own and counts). Every other job held under that id was claimed but never
-- started (inside a claim, a complete, or claimed ahead): it cannot have killed its worker, so
-- it goes back as a drain gives it (uncounted, its attempt given back, history `released`),
-- whatever the mode. A job since finished, recovered or claimed by another worker is left
-- alone; one whose cancel was requested ends canceled. The scan is of `processing` (one
-- entry per running job), which only a worker's death pays for. A repeated call with the same
-- request id gets the first call's answer (kept 15 s).
--
-- KEYS[1] -> {prefix}processing       zset, id -> lease deadline (ms)
-- KEYS[2] -> {prefix}pending          zset, score -priority, member <seq>:<id>
-- KEYS[3] -> {prefix}pending_since    zset, id -> claimable since (ms)
-- KEYS[4] -> {prefix}seq              FIFO counter
-- KEYS[5] -> {prefix}wake             capped list of wake-up hints
-- KEYS[6] -> {prefix}dead             zset, id -> time of death (ms)
-- KEYS[7] -> {prefix}reply:<request>  this call's answer, kept 15 s for a repeated call
-- KEYS[8] -> {prefix}canceled         zset, id -> canceled at (ms)
-- KEYS[9] -> {prefix}running          zset, jobs holding a limit slot (given back here)
-- KEYS[10] -> {prefix}held            zset, pending jobs a type's limit holds back
-- KEYS[11] -> {prefix}held_order      zset, the held jobs in claim order (for listings)
-- KEYS[12] -> {prefix}events          capped stream of the queue's events
--
-- ARGV[1] -> job_prefix: job key prefix ({prefix}job:); hashes of ids read from KEYS[1] are built from it
-- ARGV[2] -> worker_id: the dead worker's id
-- ARGV[3] -> mode: 'crash' (counts a recovery), 'drain' (counts nothing), 'isolate' (counts nothing,
--            marks the job to run alone) or 'cancel' (the supervisor killed the worker for its
--            job's cancel: as a crash, the job's history says sigkill). Only ARGV[10]'s job
--            gets it; every other job held gets 'drain'
-- ARGV[4] -> max_recoveries: recovery cap
-- ARGV[5] -> dead_ttl_ms: TTL of a dead job's hash (ms)
-- ARGV[6] -> wake_cap: wake list cap
-- ARGV[7] -> now_ms: now (ms) override, or '' for Redis TIME
-- ARGV[8] -> canceled_ttl_ms: TTL of a canceled job's hash (ms), as cancel.lua's
-- ARGV[9] -> events_cap: events stream cap; '0': no event (sent '0' when off: ARGV[10] follows)
-- ARGV[10] -> running_job: the id of the job the dead worker's slot showed running, or '' when its
--             slot showed none (or a job no longer its own: a lost lease); '': nothing counts
--
-- Returns {{code, job id, type}, ...}: one entry per job released, code DONE (requeued),
-- DEAD (past the recovery cap) or CANCELED (its cancel was requested); empty when the worker
-- held nothing.
-- History and event: released (a drain, or a job held but not running), recovered (a crash),
-- dead past the cap, or canceled (supervisor); one XADD per job.

--- @include "codes"
--- @include "common"
--- @include "claim"

local saved = remembered_reply(KEYS[7])
if saved then
  return saved
end
local released = {}
local loss_keys = {KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[12], KEYS[8],
  KEYS[9], KEYS[10], KEYS[11]}
local held = held_by(KEYS[1], ARGV[1], ARGV[2])
if #held == 0 then
  return released
end
local now = now_ms(ARGV[7])
for _, job in ipairs(held) do
  local job_key, job_id, job_type = job[1], job[2], job[3]
  redis.call('ZREM', KEYS[1], job_id)
  -- A job that never started cannot have killed its worker: it goes back as a drain's would.
  local mode = job_id == ARGV[10] and ARGV[3] or 'drain'
  local counts = mode ~= 'drain' and mode ~= 'isolate'
  local outcome = lose_worker(loss_keys, job_key, job_id, counts, tonumber(ARGV[4]),
    ARGV[5], tonumber(ARGV[6]), now, 'v', ARGV[9], mode == 'cancel' and 'sigkill' or 'lost',
    ARGV[8])
  if outcome == DONE and mode == 'isolate' then
    redis.call('HSET', job_key, 'alone', '1')
  end
  released[#released + 1] = {outcome, job_id, job_type}
end
return remember_reply(KEYS[7], released)
