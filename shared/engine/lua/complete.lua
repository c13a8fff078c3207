#!lua flags=allow-oom
-- complete: record a job's success and its result; optionally claim the worker's next job in
-- the same step (one round trip per job on a busy worker).
--
-- Invariant: only the worker holding the current fencing token completes a processing job;
-- the job leaves `processing` and enters `completed` in the same step. A repeated call with the
-- same token (reply lost, retried) answers DONE again and changes nothing more; its claim part
-- returns the job the first call claimed, which the worker holds beside the one it has in hand
-- (ARGV[10]; a worker without prefetch holds only the claimed one). Nothing is claimed when the
-- completion itself is refused, nor from a paused queue (the completion stands; the reply says
-- PAUSED so the worker stops asking that queue), nor a job of a type the worker does not run
-- (it stays in place, as in claim.lua).
--
-- KEYS[1] -> {prefix}job:<id>
-- KEYS[2] -> {prefix}processing       zset, id -> lease deadline (ms)
-- KEYS[3] -> {prefix}completed        zset, id -> finished_at (ms); trimmed by trim.lua
-- KEYS[4] -> {prefix}pending          zset, score -priority, member <seq>:<id>   (claim only)
-- KEYS[5] -> {prefix}pending_since    zset, id -> claimable since (ms)           (claim only)
-- KEYS[6] -> {prefix}wake             capped list of wake-up hints              (claim only)
-- KEYS[7] -> {prefix}paused           string, present while the queue is paused  (claim only)
-- KEYS[8] -> {prefix}limits           string, the queue's limits as JSON   (claim only)
-- KEYS[9] -> {prefix}running          zset, jobs holding a limit slot
-- KEYS[10] -> {prefix}held            zset, pending jobs a type's limit holds back
-- KEYS[11] -> {prefix}buckets         hash, rate-limit scope -> tokens      (claim only)
-- KEYS[12] -> {prefix}gates           zset, rate-limit scope -> next token (claim only)
-- KEYS[13] -> {prefix}held_order      zset, the held jobs in claim order (for listings)
-- KEYS[14] -> {prefix}events          capped stream of the queue's events (absent: events off)
--
-- ARGV[1] -> token: fencing token
-- ARGV[2] -> result: result (JSON text)
-- ARGV[3] -> now_ms: now (ms) override, or '' for Redis TIME
-- ARGV[4] -> job_prefix: job key prefix ({prefix}job:) for the claimed job, as in claim.lua  (claim only)
-- ARGV[5] -> worker_id: worker id claiming its next job, or '' to claim nothing
-- ARGV[6] -> lease_ms: lease length (ms)                                                    (claim only)
-- ARGV[7] -> runnable: the job types the worker runs, '|a|b|'; '' takes any type            (claim only)
-- ARGV[8] -> wake_cap: wake-up hint cap (a refused job gives a hint back)                   (claim only)
-- ARGV[9] -> events_cap: events stream cap; '0' or absent: events off, no event and no read for one
-- ARGV[10] -> holding: id of the job the worker has in hand while this call is in flight
--            (workerd.prefetch), or absent: a repeat never answers with that job
--
-- A completed job keeps what its JSON shows, its token (a repeated or stale call is told apart
-- by it) and eligible_at; it drops its id (the key holds it), seq and worker_id, and has no
-- TTL: trim.lua bounds completed jobs by count and age (docs/JOBS.md, memory).
--
-- Returns {DONE}, or {DONE, v1, ..., v14} with the claim reply of the next job after the code
--         (see includes/claim.lua), {DONE, PAUSED} when the queue is paused and nothing was
--         claimed, {NOT_RUNNABLE, type} when it completed the job but the next one is of a type
--         not in ARGV[7] (nothing claimed), {NOT_FOUND}, or {STALE_TOKEN, current status}.
-- History: completed (worker), then claimed (worker) for the next job, each in its job's HSET.
-- Events: the same two, each written just before its job's writes, whose time is the first
-- one's entry id (common.lua, stamped) (completed with the worker that ran it: ARGV[5] when
-- given, else the hash's worker_id); a repeated call writes none.
-- Redis commands: 13 when it completes and claims (HMGET, XADD, HSET, HDEL, ZREM, ZADD, then
-- MGET, ZPOPMIN, HMGET, ZREM, XADD, HSET, ZADD), 9 when nothing is left to claim (MGET,
-- ZPOPMIN, DEL), 7 when the queue is paused (MGET), 6 when asked to claim nothing, 11 when the
-- next job is refused (MGET, ZPOPMIN, HMGET, ZADD, LPUSH). With events off, a TIME in the first
-- XADD's place and no second XADD: 12, 9, 7, 6 and 11.
-- Limits (includes/common.lua): a job a concurrency limit counted gives its slot back here
-- (release_slot: ZREM, ZRANGEBYLEX, and ZREM x2 + ZADD + LPUSH when a held job returns); the
-- pause check's MGET reads the limits too (no command more), and the claim pays as claim.lua's.

--- @include "codes"
--- @include "common"
--- @include "claim"
--- @include "complete"

-- The completion (includes/complete.lua); a job a concurrency limit counted gives its slot
-- back there, with a wake-up hint only when this call claims nothing next.
local worker_id = ARGV[5]
local code, now = complete_job({KEYS[1], KEYS[2], KEYS[3], KEYS[14], KEYS[9], KEYS[10],
  KEYS[13], KEYS[4], KEYS[6]}, ARGV[1], ARGV[2], worker_id, ARGV[3], ARGV[9],
  tonumber(ARGV[8]), worker_id == '')
if code ~= DONE then
  return {code, now}
end
local prefix = ARGV[4]
if not now then
  -- A repeat: this call already ran. Nothing more to write; give back what it claimed.
  local job = worker_id ~= '' and claimed_before(KEYS[2], prefix, worker_id, ARGV[10])
  if job then
    table.insert(job, 1, DONE)
    return job
  end
  return {DONE}
end
if worker_id ~= '' then
  -- The pause check costs the hot path one command: complete reads no key of the queue's that
  -- could carry the flag for free (claim.lua reads it in the MGET it already made). The same
  -- MGET reads the limits.
  local paused, limits = unpack(redis.call('MGET', KEYS[7], KEYS[8]))
  if paused then
    return {DONE, PAUSED}
  end
  -- The limits' keys as includes/common.lua takes them; only a limited queue builds the table.
  local lk = limits and {limits = cjson.decode(limits), running = KEYS[9], held = KEYS[10],
    buckets = KEYS[11], gates = KEYS[12], order = KEYS[13], pending = KEYS[4], wake = KEYS[6]}
  local job, refused = claim_next({KEYS[4], KEYS[5], KEYS[2], KEYS[6], KEYS[14]}, prefix,
    worker_id, tonumber(ARGV[6]), now, ARGV[7], tonumber(ARGV[8]), ARGV[9], lk)
  if refused then
    return {NOT_RUNNABLE, refused}
  end
  if job then
    table.insert(job, 1, DONE)
    return job
  end
end
return {DONE}
