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

local function emit(key, cap, ...)
  if events_on(cap) then
    redis.call('XADD', key, 'MAXLEN', '~', cap, '*', ...)
  end
end

-- The pending zset member: the zero-padded Redis sequence sorts equal priorities FIFO.
local function pending_member(seq, job_id)
  return string.format('%016d:%s', seq, job_id)
end

-- A job's history: the `history` field of its hash, one line per transition, oldest first
-- (shared/history.py reads it; docs/QUEUES.md, "Job history"). An entry is
-- `<event><actor><ms since created_at>|<attempt>|<worker id>|<error type>`, trailing empty
-- fields left out; event and actor are one letter each (the tables in shared/history.py).
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

-- A job lost its worker: count it (unless the worker let go on purpose, by draining) and
-- requeue it, or declare it dead once it has lost workers more often than the cap allows.
-- The lost execution is given back (attempts - 1): losing a worker is not an application
-- failure, so it must not use up max_retries; `recoveries` counts it instead. A job whose
-- cancel was requested is not requeued: it ends canceled (end_canceled), its execution kept.
-- keys = {pending, pending_since, seq, wake, dead, events, canceled}. actor: who tells
-- (history's letter). events_cap: as emit takes it. stop: how a canceled job stopped, for its
-- history ('sigkill': the supervisor killed it for its cancel; 'lost': it died or its lease
-- expired). finished_ttl_ms: a canceled job's hash TTL.
-- History and event: recovered (counted), released (a drain), dead (with the lost
-- execution's attempt and worker), or canceled.
local function lose_worker(keys, job_key, job_id, counts, cap, dead_ttl_ms, wake_cap, now, actor,
    events_cap, stop, finished_ttl_ms)
  -- A new token fences off the lost worker: if it was only paused, its late writes are refused.
  redis.call('HINCRBY', job_key, 'token', 1)
  local job = redis.call('HMGET', job_key, 'attempts', 'history', 'created_at', 'type',
    'worker_id', 'cancel_requested_at')
  if job[6] then
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
      return DEAD
    end
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
