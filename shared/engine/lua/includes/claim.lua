-- Pop the best pending job and start it for one worker (claim.lua, and complete.lua when it
-- also claims the worker's next job). Needs codes and common included first.
--
-- A claim reply is the job's fields in claim_fields's order, with started_at in the place of the
-- 14th, status (shared/engine/scripts/ parses it by position and fills in what the caller knows: the
-- status, processing; updated_at, which equals started_at; its own worker id). What a worker
-- needs, read in the one HMGET that also checks the job is still pending; the values a claim
-- changes are filled in here rather than read back after the write. Every value crosses from
-- Redis to Lua and back once per job, so the reply carries nothing the caller already has, and
-- the scripts answer it after their code in one flat list (Redis converts each nested table
-- with checks of its own).
-- HMGET of a job's claim fields in the reply's order: `fourteenth` is 'status' for a claim,
-- 'started_at' for a repeat's reply; the fields in `...` follow, as values 16 on. The names are
-- a call's arguments, not a table: a table of them would be built on every call of every
-- script that includes this one, and unpacked on every claim (bench/MEASUREMENTS.md, "Shaking
-- the includes").
local function claim_fields(job_key, fourteenth, ...)
  return redis.call('HMGET', job_key, 'id', 'type', 'priority', 'max_retries', 'attempts',
    'recoveries', 'payload', 'created_at', 'token', 'scheduled_at', 'timeout', 'eligible_at',
    'traceparent', fourteenth, 'alone', ...)
end
local F_TYPE, F_ATTEMPTS, F_CREATED, F_TOKEN, F_STATUS, N_FIELDS = 2, 5, 8, 9, 14, 15

-- The claim reply's values of a job this worker still holds (for a repeated call), or nil:
-- read with the check that it is processing and held by `worker_id`.
local function still_held(job_key, worker_id)
  local job = claim_fields(job_key, 'started_at', 'status', 'worker_id')
  if job[N_FIELDS + 1] == 'processing' and job[N_FIELDS + 2] == worker_id then
    job[N_FIELDS + 1], job[N_FIELDS + 2] = nil, nil
    return job
  end
  return nil
end

-- Every processing job this worker holds, as {job_key, job_id, type}. A scan of `processing`
-- (one entry per running job, so about one per live worker): only repeats of a claim whose
-- reply was lost and the release of a dead worker's job need it, never a first claim.
local function held_by(processing_key, prefix, worker_id)
  local held = {}
  for _, job_id in ipairs(redis.call('ZRANGE', processing_key, 0, -1)) do
    local job_key = prefix .. job_id
    local state = redis.call('HMGET', job_key, 'worker_id', 'status', 'type')
    if state[1] == worker_id and state[2] == 'processing' then
      held[#held + 1] = {job_key, job_id, state[3]}
    end
  end
  return held
end

-- The claim reply for a job this worker already holds (a repeated call whose first reply was
-- lost), or nil when it holds none. `holding`: the id of the job the worker has in hand
-- (workerd.prefetch: it runs one job while the completion it sent claims the next), which the
-- lost call cannot have claimed; '' when none. Beside that one a worker holds at most the job
-- the lost call claimed; were there several, the latest lease is the latest claim.
local function claimed_before(processing_key, prefix, worker_id, holding)
  local held = held_by(processing_key, prefix, worker_id)
  for i = #held, 1, -1 do
    if held[i][2] ~= holding then
      return claim_fields(held[i][1], 'started_at')
    end
  end
  return nil
end

-- keys = {pending, pending_since, processing, wake, events}. now: a number, or the scripts'
-- now argument (a string: an override, or '' for Redis's clock, read only once there is a job
-- to start, from its `claimed` event's id when events are on: common.lua, stamped).
-- runnable: the worker's job types ('|a|b|'), or '' to take any. events_cap: as common.lua's
-- emit takes it; a job started is one `claimed` event (a refused or missing one is none).
-- Returns the claim reply, or nil when nothing is claimable (the wake hints are then cleared:
-- they would only send idle workers into more empty claims), or nil and the job's type when
-- the best job is of a type the worker does not run. That job goes back exactly where it was
-- (same score and member; its pending_since entry is never removed) and nothing else about it
-- changes; the wake hint this claim may have used goes back too, for a worker that runs it.
-- lk: nil for a queue without limits (nothing below costs a command then), else as
-- includes/common.lua's limited makes it: the queue-wide limits, when reached, claim nothing
-- (EMPTY, the hints cleared: a slot given back or a gate opened pushes one); a job whose type
-- is at its limit is held (lk:hold) and the next one tried; a job claimed takes its tokens,
-- and a slot (`running`, and `slot` = its token in its hash) when a concurrency limit counts it.
local function claim_next(keys, prefix, worker_id, lease, now, runnable, wake_cap, events_cap,
    lk)
  local queue_tokens
  if lk then
    if type(now) == 'string' then
      now = now_ms(now)
    end
    local blocked
    blocked, queue_tokens = lk:queue_blocked(now)
    if blocked then
      redis.call('DEL', keys[4])
      return nil
    end
  end
  -- Bounded: an entry whose hash is gone (deleted by hand), or held by its type's limit, is
  -- set aside and the next one tried.
  for _ = 1, 100 do
    local popped = redis.call('ZPOPMIN', keys[1])
    if #popped == 0 then
      redis.call('DEL', keys[4])
      return nil
    end
    local member = popped[1]
    local job_id = string.sub(member, string.find(member, ':', 1, true) + 1)
    local job_key = prefix .. job_id
    -- The history is read with the job, written with it, and left out of the reply.
    local job = claim_fields(job_key, 'status', 'history')
    local history = job[N_FIELDS + 1]
    job[N_FIELDS + 1] = nil
    -- Type names cannot hold '|' (shared/model/jobs.py): a plain find of '|type|' is exact. Inline,
    -- not a helper: every call of the script would create the helper's closure anew.
    if runnable ~= '' and job[F_STATUS] == 'pending'
        and not string.find(runnable, '|' .. job[F_TYPE] .. '|', 1, true) then
      redis.call('ZADD', keys[1], popped[2], member)
      -- The hint goes back capped as common.lua's wake_one caps it, written out here: a call
      -- would make every claim create wake_one's closure (about 1.5 % of its instructions).
      if redis.call('LPUSH', keys[4], '1') > wake_cap then
        redis.call('LTRIM', keys[4], 0, math.max(1, math.floor(wake_cap / 2)) - 1)
      end
      return nil, job[F_TYPE]
    end
    local blocked = lk and job[F_STATUS] == 'pending' and lk:type_blocked(job[F_TYPE], now)
    if blocked then
      lk:hold(job_key, job_id, job[F_TYPE], popped[2], member, job[F_TOKEN], history,
        job[F_CREATED], now, blocked, {keys[5], events_cap})
    else
      redis.call('ZREM', keys[2], job_id)
    end
    if not blocked and job[F_STATUS] == 'pending' then
      -- Strings, as HMGET answers them: a repeated call's reply is the same bytes.
      job[F_ATTEMPTS] = string.format('%d', tonumber(job[F_ATTEMPTS]) + 1)
      job[F_TOKEN] = string.format('%d', tonumber(job[F_TOKEN]) + 1)
      -- The event first: it gives the time when none is in hand yet (common.lua, stamped).
      now = stamped(now, keys[5], events_cap, 'e', 'claimed', 'j', job_id, 't', job[F_TYPE],
        'a', job[F_ATTEMPTS], 'w', worker_id)
      local started = string.format('%d', now)
      local entry = history_add(history, 'cw', job[F_CREATED], now, job[F_ATTEMPTS], worker_id)
      if lk and lk:needs_slot(job[F_TYPE]) then
        redis.call('HSET', job_key, 'status', 'processing', 'token', job[F_TOKEN],
          'attempts', job[F_ATTEMPTS], 'started_at', started, 'updated_at', started,
          'worker_id', worker_id, 'history', entry, 'slot', job[F_TOKEN])
        redis.call('ZADD', lk.running, 0, job[F_TYPE] .. '|' .. job_id)
      else
        redis.call('HSET', job_key, 'status', 'processing', 'token', job[F_TOKEN],
          'attempts', job[F_ATTEMPTS], 'started_at', started, 'updated_at', started,
          'worker_id', worker_id, 'history', entry)
      end
      if queue_tokens then
        lk:bucket_spend('q', queue_tokens, now)
      end
      redis.call('ZADD', keys[3], string.format('%d', now + lease), job_id)
      job[F_STATUS] = started
      return job
    end
  end
  return nil
end

-- Start up to `count` of the best pending jobs for one worker, each as claim_next starts one,
-- or answer a repeated request (claim.lua as a batch of one, claim_batch.lua, and
-- complete_batch.lua's claim part).
-- keys = {pending, pending_since, processing, claim:<worker> (the repeat pointer, "<request
-- id>|<job id>|..."), wake, paused, limits, running, held, buckets, gates, held_order,
-- events}. lease: its ARGV text (ms). now: as claim_next takes it. A request id that is the
-- pointer's gets the jobs it claimed that the worker still holds, and nothing more is claimed.
-- Returns {DONE, '', k, <claim reply> x k}, {NOT_RUNNABLE, type, k, ...} (stopped at a job of
-- a type not in `runnable`, left first in line), {EMPTY} or {PAUSED}.
local function claim_many(keys, prefix, worker_id, lease, request_id, now, runnable, wake_cap,
    count, events_cap)
  local last, paused, limits = unpack(redis.call('MGET', keys[4], keys[6], keys[7]))
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
  local lk = limits and limited({limits = cjson.decode(limits), running = keys[8],
    held = keys[9], buckets = keys[10], gates = keys[11], order = keys[12], pending = keys[1],
    wake = keys[5]})
  local reply, ids, refused = {DONE, '', 0}, {request_id}, nil
  for _ = 1, math.max(1, count) do
    local job
    job, refused = claim_next({keys[1], keys[2], keys[3], keys[5], keys[13]}, prefix,
      worker_id, tonumber(lease), now, runnable, wake_cap, events_cap, lk)
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
    redis.call('SET', keys[4], table.concat(ids, '|'), 'PX', lease)
  end
  return reply
end
