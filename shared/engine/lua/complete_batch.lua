#!lua flags=allow-oom
-- complete_batch: record the success of up to K jobs of one queue that one worker ran, each as
-- complete.lua records one, then claim up to `count` next jobs for that worker as
-- claim_batch.lua does: a batched worker's (WORKER_BATCH, workerd.batching) one round trip for
-- K jobs.
--
-- Invariant: each job as complete.lua's: only the holder of its current fencing token
-- completes it, and it leaves `processing` for `completed` in one step; each job is answered on
-- its own (one stale token spoils none of the others). The claim part keeps claim_batch.lua's
-- invariant for each job it starts: nothing from a paused queue (the completions stand), the
-- batch stops at a job of a type the worker does not run (left first in line). The claim runs
-- whatever the completions answered. Repeat-safe: a repeated call (its reply lost) with the
-- same tokens and request id completes nothing twice (each job's token and state tell a
-- repeat, answered DONE again) and answers with the jobs that request claimed and the worker
-- still holds (claim_batch.lua's repeat pointer), claiming nothing more.
--
-- KEYS[1] -> {prefix}processing       zset, id -> lease deadline (ms)
-- KEYS[2] -> {prefix}completed        zset, id -> finished_at (ms); trimmed by trim.lua
-- KEYS[3] -> {prefix}pending          zset, score -priority, member <seq>:<id>
-- KEYS[4] -> {prefix}pending_since    zset, id -> claimable since (ms)
-- KEYS[5] -> {prefix}claim:<worker>   string "<request id>|<job id>|...", lives one lease
-- KEYS[6] -> {prefix}wake             capped list of wake-up hints
-- KEYS[7] -> {prefix}paused           string, present while the queue is paused
-- KEYS[8] -> {prefix}limits           string, the queue's limits as JSON; absent: none
-- KEYS[9] -> {prefix}running          zset, jobs holding a limit slot
-- KEYS[10] -> {prefix}held            zset, pending jobs a type's limit holds back
-- KEYS[11] -> {prefix}buckets         hash, rate-limit scope -> tokens
-- KEYS[12] -> {prefix}gates           zset, rate-limit scope -> next token due (ms)
-- KEYS[13] -> {prefix}held_order      zset, the held jobs in claim order (for listings)
-- KEYS[14] -> {prefix}events          capped stream of the queue's events (sent with events
--             off too: the job keys follow; untouched then)
-- KEYS[15..n] -> jobs: {prefix}job:<id>  the jobs to complete, in the order they ran
--
-- ARGV[1] -> job_prefix: job key prefix ({prefix}job:) of the claimed jobs, as in claim.lua
-- ARGV[2] -> worker_id: the worker that ran the jobs and claims the next ones
-- ARGV[3] -> lease_ms: lease length (ms), each claimed job's own from its claim
-- ARGV[4] -> request_id: request id of the claim part (unique per call, the same on a repeat)
-- ARGV[5] -> now_ms: now (ms) override, or '' for Redis's clock
-- ARGV[6] -> runnable: the job types this worker runs, as '|a|b|'; '' takes any type
-- ARGV[7] -> wake_cap: wake-up hint cap
-- ARGV[8] -> count: the most jobs to claim; 0 claims nothing (a flush)
-- ARGV[9] -> events_cap: events stream cap; '0': no event
-- ARGV[10..n] -> completions: pairs, for KEYS[15..n] in order: fencing token, result (JSON)
--
-- Returns {K, code_1, detail_1, ..., code_K, detail_K, <claim part>}: per job DONE (detail
--         ''), NOT_FOUND ('') or STALE_TOKEN (detail: the job's status); the claim part is
--         claim_batch.lua's reply ({DONE, '', k, <14 values> x k}, {NOT_RUNNABLE, type, k,
--         ...}, {EMPTY}, {PAUSED}), absent when count is 0.
-- History and events: per job completed, each as complete.lua writes it (the worker named),
-- then per job claimed its `claimed`; a repeat writes none. One clock for the call: the first
-- completion's time (its event's entry id, or TIME) is every write's.
-- Redis commands: per job completed HMGET, HSET, HDEL, ZREM, ZADD, and an XADD (events off:
-- TIME once for the call); a refused or repeated job its HMGET alone. The claim part as
-- claim_batch.lua's without its TIME: MGET, per job ZPOPMIN, HMGET, ZREM, (XADD,) HSET, ZADD,
-- and the pointer's SET. For 3 completions and 3 claims, events off: 16 + 1 + 15 + 1 = 33,
-- against 3 x 12 = 36 for three complete-and-claim calls (and 3 round trips).
-- Limits (includes/common.lua): a job a concurrency limit counted gives its slot back
-- (release_slot), with a wake-up hint when the call claims nothing; when it claims, each slot
-- given back beyond the jobs it claimed pushes one (as complete.lua's one slot does), unless
-- no job is left pending (a hint would only send an idle worker into an empty claim): one
-- ZCARD, and an LPUSH a hint.

--- @include "codes"
--- @include "common"
--- @include "claim"
--- @include "complete"

local worker_id, count, events_cap = ARGV[2], tonumber(ARGV[8]), ARGV[9]
local wake_cap = tonumber(ARGV[7])
local jobs = #KEYS - 14
local reply, now, unwoken = {jobs}, ARGV[5], 0
for i = 1, jobs do
  local code, detail, freed = complete_job(KEYS[14 + i], KEYS[1], KEYS[2], KEYS[14], KEYS[9],
    KEYS[10], KEYS[13], KEYS[3], KEYS[6], ARGV[8 + 2 * i], ARGV[9 + 2 * i], worker_id, now,
    events_cap, wake_cap, count == 0)
  if freed then
    unwoken = unwoken + 1
  end
  if code == DONE then
    -- One clock for the call: the first completion's time is every later write's.
    now = detail or now
    detail = ''
  end
  reply[#reply + 1] = code
  reply[#reply + 1] = detail or ''
end
if count == 0 then
  return reply
end
local claimed = claim_many({KEYS[3], KEYS[4], KEYS[1], KEYS[5], KEYS[6], KEYS[7], KEYS[8],
  KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14]}, ARGV[1], worker_id, ARGV[3],
  ARGV[4], now, ARGV[6], wake_cap, count, events_cap)
for i = 1, #claimed do
  reply[#reply + 1] = claimed[i]
end
-- The slots this call's claims did not take again, each for a worker waiting on the limit.
-- claimed[3]: how many it claimed (absent from EMPTY and PAUSED; a paused queue wakes no one).
local taken = claimed[3] or 0
if unwoken > taken and claimed[1] ~= PAUSED and redis.call('ZCARD', KEYS[3]) > 0 then
  for _ = 1, unwoken - taken do
    wake_one(KEYS[6], wake_cap)
  end
end
return reply
