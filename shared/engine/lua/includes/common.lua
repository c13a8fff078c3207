-- Helpers every transition shares. Included (not called across scripts) so each script stays
-- one atomic unit; parameters carry key names so every key still comes from KEYS.

-- Milliseconds on Redis's clock, or the caller's override (tests control time this way).
-- One clock for every host: leases and schedules compare times written by different machines.
local function now_ms(override)
  if override ~= nil and override ~= '' then
    return tonumber(override)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Append one event to a capped stream (docs/EVENTS.md, "Writing"): the transition's own script
-- writes it, so no crash can separate the two. ...: field, value pairs, short names (e event,
-- j job id, t type, a attempt, w worker id, h host); never a payload, result or traceback.
-- Every value must be a string or a number: redis.call raises on false, and an error after the
-- script's first write would leave its transition half done (callers write `x or ''` for a
-- hash field they did not create). cap: the stream's length cap as the caller passed it (the
-- MAXLEN ~ trims whole macro nodes, so it is approximate); '0' (TASKFORGE_EVENTS=off), '' or
-- nil (a caller that passes none) writes nothing and costs no command.
local function events_on(cap)
  return cap ~= nil and cap ~= '' and cap ~= '0'
end

-- Every entry of a queue's event names the queue (`q`): on one Redis all queues write one
-- stream (shared.engine.scripts, _events_key; on a Cluster the key is the queue's own). The name is
-- read from the hash tag of the script's first key, {<ns>:<queue>} (neither name holds ':' or
-- '}'); a script of the global slot ({<ns>}: heartbeat's host events) names none. A header's
-- `{ns:queue}:v2:events` key is a Cluster's; on one Redis that key is `{ns}:v2:events`.
-- Returns the entry's id (nil with events off).
local function emit(key, cap, ...)
  if events_on(cap) then
    local queue = string.match(KEYS[1], '^{[^:}]+:([^}]+)}')
    if queue then
      return redis.call('XADD', key, 'MAXLEN', '~', cap, '*', 'q', queue, ...)
    end
    return redis.call('XADD', key, 'MAXLEN', '~', cap, '*', ...)
  end
  return nil
end

-- Write a transition's event and return the transition's time (ms): the caller's override
-- when it gives one, else the event's entry id's milliseconds, else (events off) Redis TIME.
-- An entry id `*` is Redis's own clock, the one TIME reads (never behind the stream's last
-- entry, so after a clock step back it keeps the last entry's time until the clock catches
-- up); reading it saves the TIME command (bench/PER_JOB_COST.md, "Per-job budget"). The event
-- is written first, before the writes that use the time: the script is atomic, so no reader
-- can tell the order, and every value it carries is known before them.
local function stamped(override, key, cap, ...)
  local id = emit(key, cap, ...)
  if override ~= nil and override ~= '' then
    return tonumber(override)
  end
  if id then
    return tonumber(string.sub(id, 1, string.find(id, '-', 1, true) - 1))
  end
  return now_ms('')
end

-- The pending zset member: the zero-padded Redis sequence sorts equal priorities FIFO.
local function pending_member(seq, job_id)
  return string.format('%016d:%s', seq, job_id)
end

-- A job's history: the `history` field of its hash, one line per transition, oldest first
-- (shared/engine/history.py reads it; docs/QUEUES.md, "Job history"). An entry is
-- `<event><actor><ms since created_at>|<attempt>|<worker id>|<error type>`, trailing empty
-- fields left out; event and actor are one letter each (the tables in shared/engine/history.py).
-- Appended by the transition itself, in the HSET it already makes, from the HMGET it already
-- makes: no command of its own. An entry that ends an execution (ENDS_EXECUTION) leaves
-- attempt and worker out: they are those of the claim just before it (nothing else can happen
-- to a processing job in between). Why: the worker id is the longest part, and written twice a
-- finished job's history would pass 64 bytes with a container's host name, turning its hash
-- into a hashtable under Redis's default hash-max-listpack-value. Past HISTORY_CAP entries
-- the oldest go, counted in a first line `+<dropped>`.
local HISTORY_CAP = 50
local ENDS_EXECUTION = 'drxlho'

-- Drop the oldest entries past the cap, adding them to the count of dropped ones.
local function history_capped(history)
  local dropped, body = 0, history
  if string.sub(history, 1, 1) == '+' then
    local eol = string.find(history, '\n', 1, true)
    dropped, body = tonumber(string.sub(history, 2, eol - 1)), string.sub(history, eol + 1)
  end
  local _, newlines = string.gsub(body, '\n', '\n')
  local excess = newlines + 1 - HISTORY_CAP
  if excess <= 0 then
    return history
  end
  local start = 1
  for _ = 1, excess do
    start = string.find(body, '\n', start, true) + 1
  end
  -- Without the claim before it, an entry that ends an execution would name no worker: it goes.
  if string.find(ENDS_EXECUTION, string.sub(body, start, start), 1, true) then
    start = string.find(body, '\n', start, true) + 1
    excess = excess + 1
  end
  return '+' .. (dropped + excess) .. '\n' .. string.sub(body, start)
end

-- The history field's new value: `history` (false for a job without one) and one more entry.
-- code: the event's and the actor's letters; created: the hash's created_at (a missing one
-- counts from now: an error here, after the script's first write, would leave the transition
-- half done); attempt, worker, error_type: nil when they do not apply. One concatenation per
-- shape: every intermediate string is a Lua allocation on the hot path.
local function history_add(history, code, created, now, attempt, worker, error_type)
  local at = now - (tonumber(created) or now)
  local sep = '\n'
  if not history or history == '' then
    history, sep = '', ''
  end
  if error_type then
    history = history .. sep .. code .. at .. '|' .. (attempt or '') .. '|' .. (worker or '') ..
      '|' .. error_type
  elseif worker then
    history = history .. sep .. code .. at .. '|' .. attempt .. '|' .. worker
  elseif attempt then
    history = history .. sep .. code .. at .. '|' .. attempt
  else
    history = history .. sep .. code .. at
  end
  -- An entry is at least 4 bytes with its newline, so a shorter field is within the cap: the
  -- usual transition counts nothing.
  if #history < 4 * HISTORY_CAP then
    return history
  end
  return history_capped(history)
end

-- The type of a "Type: message" error text, as history keeps it: up to the first ':' (the
-- whole text when it has none), at most 64 bytes, never a separator; nil when empty.
local function error_type_of(text)
  local kind = string.sub(string.match(text, '^[^:|\r\n]*'), 1, 64)
  if kind == '' then
    return nil
  end
  return kind
end

-- Wake one idle worker. LPUSH answers the list's length, so the cap costs a second command
-- only when it is exceeded; past the cap, extra hints would only cause empty claims. The trim
-- keeps half the cap, so a burst with no idle worker pays one LTRIM per half-cap enqueues.
local function wake_one(wake_key, wake_cap)
  if redis.call('LPUSH', wake_key, '1') > wake_cap then
    redis.call('LTRIM', wake_key, 0, math.max(1, math.floor(wake_cap / 2)) - 1)
  end
end

-- Index a job as claimable, by priority and by age, and wake one idle worker (the job hash is
-- the caller's to write). keys = {pending, pending_since, wake}. The score is formatted as %d:
-- redis.call would format a number with %.17g.
local function index_pending(keys, job_id, priority, seq, since, wake_cap)
  local score = string.format('%d', -tonumber(priority))
  redis.call('ZADD', keys[1], score, pending_member(seq, job_id))
  redis.call('ZADD', keys[2], since, job_id)
  wake_one(keys[3], wake_cap)
end

-- Make an existing job claimable. keys = {pending, pending_since, seq, wake}. keep_place: reuse
-- the job's sequence number, so a job that lost its worker goes back to its place in line
-- rather than to the back. history: the field's new value (history_add).
local function make_pending(keys, job_key, job_id, now, wake_cap, keep_place, history)
  local state = redis.call('HMGET', job_key, 'priority', 'seq', 'eligible_at')
  local seq = keep_place and tonumber(state[2]) or redis.call('INCR', keys[3])
  -- Back in its place, the job has been waiting since it first became claimable.
  local since = keep_place and tonumber(state[3]) or now
  index_pending({keys[1], keys[2], keys[4]}, job_id, state[1], seq, since, wake_cap)
  redis.call('HSET', job_key, 'status', 'pending', 'seq', seq, 'eligible_at', since,
    'updated_at', now, 'history', history)
end

-- Move a job to the dead-letter queue, recording why its last execution failed ("Type:
-- message") and, for a handler's exception, its traceback; a failure without one (a timeout, a
-- lost worker) removes the previous failure's traceback, so the two fields always describe
-- the same failure. Its hash expires after the DLQ's maximum age; trim.lua removes it (and
-- its index entry) earlier when the DLQ is over its count cap. history: the field's new value.
local function make_dead(dead_key, job_key, job_id, error_text, traceback, now, ttl_ms, history)
  if traceback ~= '' then
    redis.call('HSET', job_key, 'status', 'dead', 'finished_at', now, 'updated_at', now,
      'last_error', error_text, 'traceback', traceback, 'history', history)
    redis.call('HDEL', job_key, 'next_retry_at', 'seq')
  else
    redis.call('HSET', job_key, 'status', 'dead', 'finished_at', now, 'updated_at', now,
      'last_error', error_text, 'history', history)
    redis.call('HDEL', job_key, 'next_retry_at', 'seq', 'traceback')
  end
  redis.call('ZADD', dead_key, now, job_id)
  redis.call('PEXPIRE', job_key, ttl_ms)
end

-- A running job whose cancel was requested (cancel.lua wrote cancel_requested_at) ends here,
-- whatever ended its execution: its worker stopped it (cancel_running.lua), a failure
-- (fail.lua), the worker's death or its expired lease (lose_worker). Never retried nor
-- requeued: canceled, in the canceled index, its hash expiring as cancel.lua's does. The caller
-- has taken it out of `processing`. keys = {canceled, events}. history: the field's new value
-- (an 'o' entry: canceled while running, with how it stopped). Event: canceled, with the
-- attempt and worker of the execution it stopped.
local function end_canceled(keys, job_key, job_id, now, ttl_ms, history, events_cap, job_type,
    attempt, worker)
  redis.call('HSET', job_key, 'status', 'canceled', 'finished_at', now, 'updated_at', now,
    'history', history)
  redis.call('HDEL', job_key, 'seq', 'next_retry_at')
  redis.call('ZADD', keys[1], now, job_id)
  redis.call('PEXPIRE', job_key, ttl_ms)
  emit(keys[2], events_cap, 'e', 'canceled', 'j', job_id, 't', job_type or '', 'a',
    attempt or '', 'w', worker or '')
end

-- Concurrency and rate limits of one queue (docs/QUEUES.md, "Concurrency and rate limits").
-- Every key is in the queue's slot and comes from KEYS; the callers pass them as a table
-- `lk` = {limits = decoded JSON, running, held, order, buckets, gates, pending, wake}:
--
--   limits   string, JSON {"c": n, "r": [n, period ms], "t": {"<type>": {"c": n, "r": [...]}}};
--            absent: no limits (claim.lua reads it in the MGET it already makes: free)
--   running  zset, score 0, member <type>|<id>: every job a concurrency limit counts, from its
--            claim until it leaves `processing` (the slot is the lease's); ZLEXCOUNT counts a
--            type, ZCARD the queue (with a queue-wide limit every job takes a slot)
--   held     zset, score 0, member <type>|<10-digit 2^31 - priority>|<seq>:<id>: pending jobs
--            a type's limit holds back, a type's best (priority, then FIFO) first in lex order
--   order    zset, the same jobs as pending scores them (-priority, <seq>:<id>): where
--            GET /jobs?state=pending finds them (shared/read/listing.py)
--   buckets  hash, scope ('q' the queue, 't:<type>') -> '<tokens>|<refilled at ms>'
--   gates    zset, scope -> when its next token is due (ms); the scheduler opens a due gate
--
-- A job claimed while a concurrency limit counts it (needs_slot) carries `slot` = its fencing
-- token: an exit from processing gives the slot back only when that still matches (a claim
-- made after the limits were cleared moves the token on, so a stale mark costs nothing).

-- 2^31: priority is within ±2^31 (shared/model/jobs.py), so 2^31 + score (-priority) is 0..2^32.
local PRIORITY_BIAS = 2147483648

-- The held member of a pending entry (score, member as pending holds them).
local function held_member(job_type, score, member)
  return job_type .. '|' .. string.format('%010d', PRIORITY_BIAS + tonumber(score)) .. '|' ..
    member
end

-- A limited queue's keys (the list above; `limits`, the decoded JSON, when a claim reads it) as
-- one object, with the limit helpers as its methods (lk:release_slot(...), lk:hold(...)): a
-- script makes them when it meets a limit, a job holding a slot or a queue with limits. Why:
-- every top-level definition is a closure each call of a script creates, and these ten (with
-- their upvalues) were about 3 % of Redis's instructions for an unlimited complete-and-claim
-- (bench/MEASUREMENTS.md, "Shaking the includes"). Returns lk.
local function limited(lk)
  -- Move one held entry back to pending, to its place in line (same score and member).
  local function unhold(lk, entry)
    local bar = string.find(entry, '|', 1, true)
    local score = tonumber(string.sub(entry, bar + 1, bar + 10)) - PRIORITY_BIAS
    local member = string.sub(entry, bar + 12)
    redis.call('ZREM', lk.held, entry)
    redis.call('ZREM', lk.order, member)
    redis.call('ZADD', lk.pending, string.format('%d', score), member)
  end

  -- A type's best held entry, or nil. Type names hold no '|' (shared/model/jobs.py) and '}' follows
  -- '|' in byte order, so [type| .. (type} is exactly the type's entries.
  local function best_held(lk, job_type)
    return redis.call('ZRANGEBYLEX', lk.held, '[' .. job_type .. '|', '(' .. job_type .. '}',
      'LIMIT', 0, 1)[1]
  end

  -- Give a job's slot back as it leaves processing (every exit calls this, and only for a job
  -- whose `slot` mark equals the token it was claimed with): the type's best held job returns to
  -- pending. hint: push a wake-up hint even when none was held (a claim may be waiting on the
  -- queue-wide limit); false when the caller's worker claims next in the same script.
  -- Returns true when it gave a slot back and woke no one (complete_batch.lua counts those).
  -- Idempotent: a slot already given back (ZREM answers 0) does nothing more.
  local function release_slot(lk, job_id, job_type, wake_cap, hint)
    job_type = job_type or ''
    if redis.call('ZREM', lk.running, job_type .. '|' .. job_id) == 0 then
      return false
    end
    local entry = best_held(lk, job_type)
    if entry then
      unhold(lk, entry)
    end
    if entry or hint then
      wake_one(lk.wake, wake_cap)
      return false
    end
    return true
  end

  -- A scope's tokens refilled up to now (a float; a full bucket when it has none yet).
  -- rate = {n, period ms}: n tokens a period, at most n in the bucket.
  local function bucket_tokens(lk, scope, rate, now)
    local raw = redis.call('HGET', lk.buckets, scope)
    if not raw then
      return rate[1]
    end
    local bar = string.find(raw, '|', 1, true)
    local tokens, at = tonumber(string.sub(raw, 1, bar - 1)), tonumber(string.sub(raw, bar + 1))
    return math.min(rate[1], tokens + math.max(0, now - at) * rate[1] / rate[2])
  end

  local function bucket_spend(lk, scope, tokens, now)
    redis.call('HSET', lk.buckets, scope, string.format('%.6f|%d', tokens - 1, now))
  end

  -- Close a scope out of tokens until its next token is due.
  local function gate_close(lk, scope, rate, tokens, now)
    redis.call('ZADD', lk.gates, string.format('%d', now + math.ceil((1 - tokens) * rate[2] /
      rate[1])), scope)
  end

  -- Whether a job of this type takes a slot: a concurrency limit counts it (the queue's, or its
  -- type's). A rate limit alone needs none, so the jobs of other types cost nothing more.
  local function needs_slot(lk, job_type)
    local limit = lk.limits.t and lk.limits.t[job_type]
    return lk.limits.c or (limit and limit.c)
  end

  -- Why the queue-wide limits let nothing be claimed now ('concurrency' or 'rate'), or nil; with
  -- the queue's tokens when it has a rate (spent once a job is claimed).
  local function queue_blocked(lk, now)
    local limits = lk.limits
    if limits.c and redis.call('ZCARD', lk.running) >= limits.c then
      return 'concurrency'
    end
    if limits.r then
      local tokens = bucket_tokens(lk, 'q', limits.r, now)
      if tokens < 1 then
        gate_close(lk, 'q', limits.r, tokens, now)
        return 'rate'
      end
      return nil, tokens
    end
    return nil
  end

  -- Why a job of this type must wait ('concurrency' or 'rate'), or nil; a type's token is spent
  -- here when it may run (the caller claims it at once).
  local function type_blocked(lk, job_type, now)
    local limit = lk.limits.t and lk.limits.t[job_type]
    if not limit then
      return nil
    end
    if limit.c and redis.call('ZLEXCOUNT', lk.running, '[' .. job_type .. '|',
        '(' .. job_type .. '}') >= limit.c then
      return 'concurrency'
    end
    if limit.r then
      local scope = 't:' .. job_type
      local tokens = bucket_tokens(lk, scope, limit.r, now)
      if tokens < 1 then
        gate_close(lk, scope, limit.r, tokens, now)
        return 'rate'
      end
      bucket_spend(lk, scope, tokens, now)
    end
    return nil
  end

  -- Park a popped pending job in `held` (it stays pending, keeps its pending_since entry and its
  -- place in line). The first hold of a wait (its `held` mark differs from its token) writes one
  -- history entry and one event; a re-park writes neither. events: {key, cap}.
  local function hold(lk, job_key, job_id, job_type, score, member, token, history, created, now,
      reason, events)
    redis.call('ZADD', lk.held, 0, held_member(job_type, score, member))
    redis.call('ZADD', lk.order, score, member)
    if redis.call('HGET', job_key, 'held') == token then
      return
    end
    redis.call('HSET', job_key, 'held', token, 'history',
      history_add(history, 'bw', created, now, nil, nil, reason))
    emit(events[1], events[2], 'e', 'held', 'j', job_id, 't', job_type, 'r', reason)
  end

  lk.unhold, lk.best_held, lk.release_slot, lk.bucket_tokens, lk.bucket_spend = unhold,
    best_held, release_slot, bucket_tokens, bucket_spend
  lk.gate_close, lk.needs_slot, lk.queue_blocked, lk.type_blocked, lk.hold = gate_close,
    needs_slot, queue_blocked, type_blocked, hold
  return lk
end

-- A job lost its worker: count it (unless the worker let go on purpose, by draining) and
-- requeue it, or declare it dead once it has lost workers more often than the cap allows.
-- The lost execution is given back (attempts - 1): losing a worker is not an application
-- failure, so it must not use up max_retries; `recoveries` counts it instead. A job whose
-- cancel was requested is not requeued: it ends canceled (end_canceled), its execution kept.
-- keys = {pending, pending_since, seq, wake, dead, events, canceled, running, held,
-- held_order}. actor: who tells (history's letter). events_cap: as emit takes it. stop: how a
-- canceled job stopped, for its history ('sigkill': the supervisor killed it for its cancel;
-- 'lost': it died or its lease expired). finished_ttl_ms: a canceled job's hash TTL. A job
-- holding a limit slot gives it back (release_slot), whichever way it leaves.
-- History and event: recovered (counted), released (a drain), dead (with the lost
-- execution's attempt and worker), or canceled.
local function lose_worker(keys, job_key, job_id, counts, cap, dead_ttl_ms, wake_cap, now, actor,
    events_cap, stop, finished_ttl_ms)
  -- A new token fences off the lost worker: if it was only paused, its late writes are refused.
  local token = redis.call('HINCRBY', job_key, 'token', 1)
  local job = redis.call('HMGET', job_key, 'attempts', 'history', 'created_at', 'type',
    'worker_id', 'cancel_requested_at', 'slot')
  local lk = job[7] == string.format('%d', token - 1) and
    limited({running = keys[8], held = keys[9], order = keys[10], pending = keys[1],
      wake = keys[4]})
  if job[6] then
    if lk then
      lk:release_slot(job_id, job[4], wake_cap, true)
    end
    end_canceled({keys[7], keys[6]}, job_key, job_id, now, finished_ttl_ms,
      history_add(job[2], 'o' .. actor, job[3], now, nil, nil, stop), events_cap, job[4],
      job[1], job[5])
    return CANCELED
  end
  if tonumber(job[1]) > 0 then
    redis.call('HINCRBY', job_key, 'attempts', -1)
  end
  if counts then
    local recoveries = redis.call('HINCRBY', job_key, 'recoveries', 1)
    if recoveries > cap then
      make_dead(keys[5], job_key, job_id,
        'WorkerLost: worker lost ' .. recoveries .. ' times (recovery cap ' .. cap .. '): ' ..
        'the job may be killing its worker', '', now, dead_ttl_ms,
        history_add(job[2], 'x' .. actor, job[3], now, nil, nil, 'WorkerLost'))
      emit(keys[6], events_cap, 'e', 'dead', 'j', job_id, 't', job[4] or '', 'a', job[1],
        'w', job[5] or '')
      if lk then
        lk:release_slot(job_id, job[4], wake_cap, true)
      end
      return DEAD
    end
  end
  -- The requeued job's own hint (make_pending) wakes a claim: the slot's need not.
  if lk then
    lk:release_slot(job_id, job[4], wake_cap, false)
  end
  make_pending({keys[1], keys[2], keys[3], keys[4]}, job_key, job_id, now, wake_cap, true,
    history_add(job[2], (counts and 'l' or 'h') .. actor, job[3], now))
  emit(keys[6], events_cap, 'e', counts and 'recovered' or 'released', 'j', job_id,
    't', job[4] or '')
  return DONE
end

-- Repeat safety (a reply lost, the same call sent again) rests on the caller's request id, kept
-- where the call's effect is: a transition of one job started by a request (cancel, replay,
-- release) keeps it in the job's `last_request` field; a claim in `claim:<worker>` (only a
-- claim's own pointer can tell a repeat from a new claim); a purge, which deletes the job, in
-- the `purged:<id>` tombstone; a batch, which touches many jobs, in `reply:<request>`.
-- complete and fail need none: the fencing token and the job's state already tell a repeat.

-- The refusal a worker's call on its claimed job gets when the job is gone ({NOT_FOUND}) or the
-- worker's fencing token is no longer the job's ({STALE_TOKEN, status}: the lease passed to
-- another claim); nil when the call may go on. `state` is an HMGET whose first two fields are
-- status and token.
local function token_refusal(state, token)
  if not state[1] then
    return {NOT_FOUND}
  end
  if state[2] ~= token then
    return {STALE_TOKEN, state[1]}
  end
  return nil
end

-- Batch scripts (promote, recover, trim) act on whatever is due, so a repeated call (its reply
-- was lost, redis-py retried) would find nothing left and answer "nothing": the caller would
-- never log or count what the first call did. They keep their answer for 15 s (redis-py
-- retries within a second or two) under the request id and give it again to a repeat.
local function remembered_reply(reply_key)
  local saved = redis.call('GET', reply_key)
  if saved then
    return cjson.decode(saved)
  end
  return nil
end

local function remember_reply(reply_key, reply)
  redis.call('SET', reply_key, cjson.encode(reply), 'PX', 15000)
  return reply
end

-- Call visit(second, failures) for each second first_s..last_s that the per-second failures
-- hash (fail.lua counts there) holds (trim.lua rolls them into minutes; throughput.lua reads the
-- ones not rolled yet). HMGET in chunks of 1,000: unpack has a stack limit.
local function each_failure_second(failures_key, first_s, last_s, visit)
  local s = first_s
  while s <= last_s do
    local seconds = {}
    for second = s, math.min(last_s, s + 999) do
      seconds[#seconds + 1] = second
    end
    local values = redis.call('HMGET', failures_key, unpack(seconds))
    for i, second in ipairs(seconds) do
      if values[i] then
        visit(second, tonumber(values[i]))
      end
    end
    s = s + 1000
  end
end
