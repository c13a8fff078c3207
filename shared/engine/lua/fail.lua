#!lua flags=allow-oom
-- fail: record a failed execution; retry it after a backoff, or declare it dead.
--
-- Invariant: max_retries is the maximum number of executions: a failure on attempt
-- max_retries (or a permanent failure) is dead and enters the DLQ exactly once; an earlier one
-- waits in `retrying` for base * 2^(attempts-1) ms, capped, with optional jitter. Only the
-- holder of the current token can fail the job; a repeated call with that token returns the
-- first call's outcome and writes nothing (the error and traceback are stored once). Each
-- failure recorded here (retry or death, not a repeat) adds one to the queue's count of the
-- second it happened in, which GET /queues sums over the last minute.
--
-- KEYS[1] -> {prefix}job:<id>
-- KEYS[2] -> {prefix}processing   zset, id -> lease deadline (ms)
-- KEYS[3] -> {prefix}retrying     zset, id -> next_retry_at (ms)
-- KEYS[4] -> {prefix}dead         zset, id -> time of death (ms)
-- KEYS[5] -> {prefix}failures     hash, second (epoch s) -> failed executions; trim.lua forgets
--                                  seconds past the last minute
-- KEYS[6] -> {prefix}canceled     zset, id -> canceled at (ms)
-- KEYS[7] -> {prefix}running      zset, jobs holding a limit slot (includes/common.lua)
-- KEYS[8] -> {prefix}held         zset, pending jobs a type's limit holds back
-- KEYS[9] -> {prefix}pending      zset, score -priority, member <seq>:<id> (a held job returns)
-- KEYS[10] -> {prefix}wake        capped list of wake-up hints
-- KEYS[11] -> {prefix}held_order  zset, the held jobs in claim order (for listings)
-- KEYS[12] -> {prefix}events      capped stream of the queue's events
--
-- ARGV[1] -> token: fencing token
-- ARGV[2] -> error: error text, "Type: message" (already length-capped by the caller)
-- ARGV[3] -> retry_base_ms: base delay (ms)
-- ARGV[4] -> retry_max_ms: maximum delay (ms)
-- ARGV[5] -> retry_jitter: jitter fraction (0..1): the delay moves by up to ± this share of itself
-- ARGV[6] -> draw: a uniform random number in [0, 1) drawn by the caller (scripts must not draw)
-- ARGV[7] -> permanent: '1' for a permanent failure (dead now, whatever attempts remain), else '0'
-- ARGV[8] -> dead_ttl_ms: TTL of a dead job's hash (ms): the DLQ's maximum age
-- ARGV[9] -> now_ms: now (ms) override, or '' for Redis TIME
-- ARGV[10] -> traceback: the handler's traceback (already capped by the caller), or '' for none
-- ARGV[11] -> actor: who reports the failure, history's actor letter: 'w' the worker, 'v' the
--             supervisor (a timeout: it killed the worker)
-- ARGV[12] -> canceled_ttl_ms: TTL of a canceled job's hash (ms): retention plus a margin, as cancel.lua's
-- ARGV[13] -> wake_cap: wake-up hint cap (a held job the freed limit slot lets go is hinted)
-- ARGV[14] -> events_cap: events stream cap; '0' or absent: no event
--
-- A job whose cancel was requested (cancel.lua) is not retried nor dead: its failure (the
-- handler raised before its worker learned of the request, or it timed out) ends it canceled,
-- as cancel_running.lua would, and is not counted among the queue's failures.
--
-- Returns {RETRYING, type, attempts, next_retry_at}, {DEAD, type, attempts}, {CANCELED, type,
--         attempts}, {NOT_FOUND}, or
--         {STALE_TOKEN, current status}: the type and attempt number are what the caller logs
--         and counts, so it needs no read of its own.
-- History: retrying or dead, with the error's type, in the HSET either path makes; canceled
-- ('o', stopped 'failed' or 'timeout') for a job asked to stop.
-- Event: retrying or dead, with the attempt that failed and its worker; a repeat writes none.
-- Redis commands: 7 to retry (HMGET, XADD, ZREM, HINCRBY, HSET, [HDEL], ZADD), 8 to declare
-- it dead (HMGET, XADD, ZREM, HINCRBY, HSET, HDEL, ZADD, PEXPIRE); the same with events off,
-- a TIME in the XADD's place (the event's entry id is the time: common.lua, stamped). The
-- HINCRBY counts the queue's failures per second (no key fail.lua touches can count failures
-- for free). A job holding a limit slot gives it back
-- (release_slot: ZREM, ZRANGEBYLEX, LPUSH; ZREM x2 + ZADD more when a held job returns).

--- @include "codes"
--- @include "common"

-- The worker's id (the event's) is read only with events on: it is at the end of the hash,
-- behind the payload, a scan. Off, 'id' again takes its place (early, so cheap).
local events_cap = ARGV[14]
local state = redis.call('HMGET', KEYS[1], 'status', 'token', 'id', 'attempts', 'max_retries',
  'next_retry_at', 'type', 'history', 'created_at', events_on(events_cap) and 'worker_id' or 'id',
  'cancel_requested_at', 'slot')
local refused = token_refusal(state, ARGV[1])
if refused then
  return refused
end
local job_type, attempts = state[7], tonumber(state[4])
if state[1] == 'retrying' then
  return {RETRYING, job_type, attempts, tonumber(state[6])}
end
if state[1] == 'dead' then
  return {DEAD, job_type, attempts}
end
if state[1] == 'canceled' then
  return {CANCELED, job_type, attempts}
end
if state[1] ~= 'processing' then
  return {STALE_TOKEN, state[1]}
end

local job_id = state[3]
local dead = ARGV[7] == '1' or attempts >= tonumber(state[5])
local now
if state[11] then
  now = now_ms(ARGV[9])  -- ends canceled: end_canceled writes that event
else
  -- The event first: its entry id gives the time (common.lua, stamped), no TIME command.
  now = stamped(ARGV[9], KEYS[12], events_cap, 'e', dead and 'dead' or 'retrying', 'j', job_id,
    't', job_type or '', 'a', state[4], 'w', state[10] or '')
end
redis.call('ZREM', KEYS[2], job_id)
if state[12] == state[2] then
  limited({running = KEYS[7], held = KEYS[8], order = KEYS[11], pending = KEYS[9],
    wake = KEYS[10]}):release_slot(job_id, job_type, tonumber(ARGV[13]), true)
end
if state[11] then
  end_canceled({KEYS[6], KEYS[12]}, KEYS[1], job_id, now, ARGV[12],
    history_add(state[8], 'o' .. ARGV[11], state[9], now, nil, nil,
      ARGV[11] == 'v' and 'timeout' or 'failed'), events_cap, job_type, state[4], state[10])
  return {CANCELED, job_type, attempts}
end
redis.call('HINCRBY', KEYS[5], string.format('%d', math.floor(now / 1000)), 1)

local function history(event)
  return history_add(state[8], event .. ARGV[11], state[9], now, nil, nil,
    error_type_of(ARGV[2]))
end

if dead then
  make_dead(KEYS[4], KEYS[1], job_id, ARGV[2], ARGV[10], now, ARGV[8], history('x'))
  return {DEAD, job_type, attempts}
end

-- The maximum is a hard ceiling: jitter spreads retries below it, never past it.
local max_delay = tonumber(ARGV[4])
local delay = math.min(tonumber(ARGV[3]) * 2 ^ (attempts - 1), max_delay)
delay = delay + delay * tonumber(ARGV[5]) * (2 * tonumber(ARGV[6]) - 1)
local due = now + math.floor(math.max(0, math.min(delay, max_delay)))
-- The error and traceback always describe the same failure: one without a traceback (a
-- timeout) removes the previous failure's.
if ARGV[10] ~= '' then
  redis.call('HSET', KEYS[1], 'status', 'retrying', 'next_retry_at', due, 'updated_at', now,
    'last_error', ARGV[2], 'traceback', ARGV[10], 'history', history('r'))
else
  redis.call('HSET', KEYS[1], 'status', 'retrying', 'next_retry_at', due, 'updated_at', now,
    'last_error', ARGV[2], 'history', history('r'))
  redis.call('HDEL', KEYS[1], 'traceback')
end
redis.call('ZADD', KEYS[3], due, job_id)
return {RETRYING, job_type, attempts, due}
