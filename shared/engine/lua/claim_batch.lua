#!lua flags=allow-oom
-- claim_batch: start up to `count` of the best pending jobs for one worker, in one step, each
-- exactly as claim.lua starts one: nothing from a paused queue.
--
-- Invariant: as claim.lua's, for each job: it leaves `pending` only by becoming `processing`
-- with attempts+1, started_at, the worker's id, its own lease deadline in `processing` and its
-- own fresh fencing token, all at once. Jobs are taken in claim order (highest priority, then
-- FIFO); the batch stops early at an empty queue, at a limit (as claim.lua's includes/claim.lua
-- holds a job, a held job is skipped), or at a job of a type the worker does not run, which
-- stays first in line. A repeated call with the same request id (a reply lost and retried)
-- returns the jobs that request claimed and still holds, claiming nothing more. Nothing wired
-- into workerd yet (issue 30: a worker running several jobs at once would fill its slots in
-- one call; bench/PER_JOB_COST.md, "Batched claim").
--
-- KEYS[1] -> {prefix}pending          zset, score -priority, member <seq>:<id>
-- KEYS[2] -> {prefix}pending_since    zset, id -> claimable since (ms)
-- KEYS[3] -> {prefix}processing       zset, id -> lease deadline (ms)
-- KEYS[4] -> {prefix}claim:<worker>   string "<request id>|<job id>|<job id>...", lives one lease
-- KEYS[5] -> {prefix}wake             capped list of wake-up hints; emptied when none is claimable
-- KEYS[6] -> {prefix}paused           string, present while the queue is paused
-- KEYS[7] -> {prefix}limits           string, the queue's limits as JSON; absent: none
-- KEYS[8] -> {prefix}running          zset, <type>|<id> of each job holding a limit slot
-- KEYS[9] -> {prefix}held             zset, pending jobs a type's limit holds back
-- KEYS[10] -> {prefix}buckets         hash, rate-limit scope -> tokens
-- KEYS[11] -> {prefix}gates           zset, rate-limit scope -> next token due (ms)
-- KEYS[12] -> {prefix}held_order      zset, the held jobs in claim order (for listings)
-- KEYS[13] -> {prefix}events          capped stream of the queue's events
--
-- ARGV[1] -> job_prefix: job key prefix ({prefix}job:); each popped id's hash is built from it,
--            inside the same hash tag (as in claim.lua: only Redis knows the ids)
-- ARGV[2] -> worker_id: worker id
-- ARGV[3] -> lease_ms: lease length (ms), each job's own from its claim
-- ARGV[4] -> request_id: request id (unique per call)
-- ARGV[5] -> now_ms: now (ms) override, or '' for Redis's clock
-- ARGV[6] -> runnable: the job types this worker runs, as '|a|b|'; '' takes any type
-- ARGV[7] -> wake_cap: wake-up hint cap
-- ARGV[8] -> count: the most jobs to claim (1 or more)
-- ARGV[9] -> events_cap: events stream cap; '0' or absent: no event
--
-- Returns {DONE, '', k, <14 values> x k}: k jobs claimed (k ≥ 1), each job's values as a claim
--         reply's (includes/claim.lua), one after another in claim order; {NOT_RUNNABLE, type,
--         k, ...}: the same, stopped at a job of `type`, which the worker does not run; {EMPTY}
--         when nothing was claimed nor refused; {PAUSED} when the queue is paused.
-- History and events: each job's `claimed`, as claim.lua writes them (a held job's `held`).
-- Redis commands: MGET, then per job claimed ZPOPMIN, HMGET, ZREM, XADD (TIME once with events
-- off), HSET, ZADD; then a SET of the repeat pointer; a batch that empties the queue ends with
-- ZPOPMIN and DEL. For 8 jobs: 1 + 8 x 6 + 1 = 50, against 8 x 8 = 64 for 8 claims.

--- @include "codes"
--- @include "common"
--- @include "claim"

local prefix, worker_id, request_id = ARGV[1], ARGV[2], ARGV[4]
local last, paused, limits = unpack(redis.call('MGET', KEYS[4], KEYS[6], KEYS[7]))
if last then
  local sep = string.find(last, '|', 1, true)
  if string.sub(last, 1, sep - 1) == request_id then
    -- A repeat: the jobs this request claimed that the worker still holds.
    local reply = {DONE, '', 0}
    for job_id in string.gmatch(string.sub(last, sep + 1), '[^|]+') do
      local job = still_held(prefix .. job_id, worker_id)
      if job then
        for i = 1, #job do
          reply[#reply + 1] = job[i]
        end
        reply[3] = reply[3] + 1
      end
    end
    return reply[3] > 0 and reply or {EMPTY}
  end
end
if paused then
  return {PAUSED}
end

local lk = limits and {limits = cjson.decode(limits), running = KEYS[8], held = KEYS[9],
  buckets = KEYS[10], gates = KEYS[11], order = KEYS[12], pending = KEYS[1], wake = KEYS[5]}
local reply, ids, now, refused = {DONE, '', 0}, {request_id}, ARGV[5], nil
for _ = 1, math.max(1, tonumber(ARGV[8])) do
  local job
  job, refused = claim_next({KEYS[1], KEYS[2], KEYS[3], KEYS[5], KEYS[13]}, prefix, worker_id,
    tonumber(ARGV[3]), now, ARGV[6], tonumber(ARGV[7]), ARGV[9], lk)
  if not job then
    break
  end
  -- One clock for the batch: the first claim's time (its event's, or TIME) starts them all.
  now = tonumber(job[F_STATUS])
  ids[#ids + 1] = job[1]
  for i = 1, #job do
    reply[#reply + 1] = job[i]
  end
  reply[3] = reply[3] + 1
end
if refused then
  reply[1], reply[2] = NOT_RUNNABLE, refused
elseif reply[3] == 0 then
  return {EMPTY}
end
if reply[3] > 0 then
  redis.call('SET', KEYS[4], table.concat(ids, '|'), 'PX', ARGV[3])
end
return reply
