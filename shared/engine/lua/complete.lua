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

-- The completion is written out here, not called from includes/complete.lua's complete_job as
-- complete_batch.lua does: made a function, it cost this hot path 2 % more Redis instructions a
-- job (bench.instructions, 2026-12-06: 335,300 → 342,900 per complete + claim next, in two
-- runs), which a job that does not batch must not pay. The two are the same steps; the engine
-- tests hold each (test_complete.py, test_complete_batch.py).
-- With events on, the event's fields are read in the same HMGET: the type, and the worker's id
-- unless the call names it (a worker claiming its next job completes its own). Only then: a
-- field read is a scan of the hash, and worker_id is at its end, behind the payload.
-- The type and the slot mark are read always: a job holding a limit slot gives it back.
local events_cap, worker_id = ARGV[9], ARGV[5]
local state
if not events_on(events_cap) or worker_id ~= '' then
  state = redis.call('HMGET', KEYS[1], 'status', 'token', 'id', 'history', 'created_at', 'type',
    'slot')
  state[8] = worker_id
else
  state = redis.call('HMGET', KEYS[1], 'status', 'token', 'id', 'history', 'created_at', 'type',
    'slot', 'worker_id')
end
local refused = token_refusal(state, ARGV[1])
if refused then
  return refused
end
local prefix = ARGV[4]
if state[1] == 'completed' then
  -- A repeat: this call already ran. Nothing more to write; give back what it claimed.
  local job = worker_id ~= '' and claimed_before(KEYS[2], prefix, worker_id, ARGV[10])
  if job then
    table.insert(job, 1, DONE)
    return job
  end
  return {DONE}
end
if state[1] ~= 'processing' then
  return {STALE_TOKEN, state[1]}
end

-- The event first: its entry id gives the time (common.lua, stamped), no TIME command.
local now = stamped(ARGV[3], KEYS[14], events_cap, 'e', 'completed', 'j', state[3],
  't', state[6] or '', 'w', state[8] or '')
-- Formatted once: a number given to redis.call is formatted with %.17g on every use.
local stamp = string.format('%d', now)
redis.call('HSET', KEYS[1], 'status', 'completed', 'result', ARGV[2], 'finished_at', stamp,
  'updated_at', stamp, 'history', history_add(state[4], 'dw', state[5], now))
-- Nothing reads these once the job is done; without them the hash fits a smaller allocation.
redis.call('HDEL', KEYS[1], 'id', 'seq', 'worker_id', 'slot', 'held')
redis.call('ZREM', KEYS[2], state[3])
redis.call('ZADD', KEYS[3], stamp, state[3])
-- The limits' keys and helpers (includes/common.lua, limited); only a limited queue makes them.
local lk
if state[7] == state[2] then
  lk = limited({running = KEYS[9], held = KEYS[10], buckets = KEYS[11], gates = KEYS[12],
    order = KEYS[13], pending = KEYS[4], wake = KEYS[6]})
  lk:release_slot(state[3], state[6], tonumber(ARGV[8]), worker_id == '')
end
if worker_id ~= '' then
  -- The pause check costs the hot path one command: complete reads no key of the queue's that
  -- could carry the flag for free (claim.lua reads it in the MGET it already made). The same
  -- MGET reads the limits.
  local paused, limits = unpack(redis.call('MGET', KEYS[7], KEYS[8]))
  if paused then
    return {DONE, PAUSED}
  end
  if limits then
    -- The same keys as the slot's lk above: made once when the job gave a slot back.
    lk = lk or limited({running = KEYS[9], held = KEYS[10], buckets = KEYS[11],
      gates = KEYS[12], order = KEYS[13], pending = KEYS[4], wake = KEYS[6]})
    lk.limits = cjson.decode(limits)
  else
    lk = nil
  end
  local job, refused = claim_next({KEYS[4], KEYS[5], KEYS[2], KEYS[6], KEYS[14]}, prefix,
    worker_id, tonumber(ARGV[6]), now, ARGV[7], tonumber(ARGV[8]), events_cap, lk)
  if refused then
    return {NOT_RUNNABLE, refused}
  end
  if job then
    table.insert(job, 1, DONE)
    return job
  end
end
return {DONE}
