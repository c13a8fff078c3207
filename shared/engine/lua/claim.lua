#!lua flags=allow-oom
-- claim: pop the best pending job and start it, in one step; nothing from a paused queue.
--
-- Invariant: a job leaves `pending` only by becoming `processing` with attempts+1, started_at,
-- the worker's id, a lease deadline in `processing` and a fresh fencing token, all at once.
-- Were the pop and the metadata update two steps, a worker dying between them would leave a
-- job out of `pending` but still marked pending, where no recovery looks for it.
-- Best = highest priority, then lowest sequence (FIFO). A repeated call with the same request
-- id (a reply lost and retried) returns the job that request already claimed instead of
-- claiming a second one. The job keeps its `seq` field: if its worker is lost it goes back to
-- the same place in line. A paused queue (its `paused` flag set) answers PAUSED and claims
-- nothing; the flag is read in the same MGET as the repeat pointer, so it costs no command.
-- A worker takes only the job types it runs: when the best job is of another type it stays
-- exactly where it is, for a worker that runs it (docs/QUEUES.md, "Routing"), and this worker
-- is told its type.
--
-- KEYS[1] -> {prefix}pending          zset, score -priority, member <seq>:<id>
-- KEYS[2] -> {prefix}pending_since    zset, id -> claimable since (ms)
-- KEYS[3] -> {prefix}processing       zset, id -> lease deadline (ms)
-- KEYS[4] -> {prefix}claim:<worker>   string "<request id>|<job id>", lives one lease
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
-- ARGV[1] -> job_prefix: job key prefix ({prefix}job:); the popped id's hash is built from it, inside the
--            same hash tag (the one exception to "every key in KEYS": only Redis knows the id)
-- ARGV[2] -> worker_id: worker id
-- ARGV[3] -> lease_ms: lease length (ms)
-- ARGV[4] -> request_id: request id (unique per claim call)
-- ARGV[5] -> now_ms: now (ms) override, or '' for Redis TIME
-- ARGV[6] -> runnable: the job types this worker runs, as '|a|b|'; '' takes any type
-- ARGV[7] -> wake_cap: wake-up hint cap (a refused job gives its hint back, capped as enqueue does)
-- ARGV[8] -> events_cap: events stream cap; '0' or absent: no event
--
-- Returns {DONE, v1, ..., v14}: the code, then the claim reply's values (the job's fields in a
--         fixed order: see includes/claim.lua), in one flat list; {EMPTY}; {PAUSED}, when
--         the queue is paused (a repeated call still gets the job its first call claimed); or
--         {NOT_RUNNABLE, type} when the best job is of a type not in ARGV[6] (nothing claimed).
-- Limits (docs/QUEUES.md, "Concurrency and rate limits"; includes/common.lua): the limits
-- string is read in the same MGET, so a queue without limits does exactly what it did before.
-- With limits, a queue-wide limit reached answers EMPTY (hints cleared, as for an empty
-- queue), and a job whose type is at its limit is held (history and event `held`, once per
-- wait) while the claim goes on to the next job.
-- Event: claimed (with attempt and worker) when a job is claimed; held when a job is first
-- held; none otherwise, nor for a repeated call.
-- Redis commands: 8 when a job is claimed (MGET, ZPOPMIN, HMGET, ZREM, XADD, HSET, ZADD, SET;
-- with events off a TIME in the XADD's place: its entry id is the time, common.lua, stamped),
-- 3 when none is (MGET, ZPOPMIN, DEL), 1 when paused (MGET), 5 when the best job is refused
-- (MGET, ZPOPMIN, HMGET, ZADD, LPUSH; an LTRIM past the hint cap); tests/engine/test_budgets.py
-- holds them to it. A limited queue pays, on a claim: ZCARD for a
-- queue-wide concurrency limit, ZLEXCOUNT for a type's, HGET + HSET per rate bucket, TIME
-- early, and ZADD to `running`; a job held costs ZADD + HGET (+ HSET and XADD the first time).

--- @include "codes"
--- @include "common"
--- @include "claim"

-- One claim is a batch of one (includes/claim.lua, claim_many: the repeat pointer, the pause
-- check, the limits and the claim itself), answered in this script's flat shape.
local reply = claim_many(KEYS, ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6],
  tonumber(ARGV[7]), 1, ARGV[8])
if reply[1] == DONE then
  return {DONE, unpack(reply, 4)}
end
if reply[1] == NOT_RUNNABLE then
  return {NOT_RUNNABLE, reply[2]}
end
return reply
