-- complete_job's limit helpers (common.lua, limited) for the jobs of this call that give a
-- slot back: made by the first of them, not once a job. One set of keys serves them all: a
-- call's jobs are of one queue (complete_batch.lua passes the queue's keys for each).
local slot_lk = false

-- Complete one processing job for the holder of its fencing token (complete_batch.lua, once
-- per job; complete.lua writes the same steps out inline: see its comment on why). Needs codes
-- and common included first.
--
-- The keys come one by one, not in a table: a table built per call cost the default path's
-- complete.lua 3 % more Redis instructions a job (bench.instructions), and it pays nothing for
-- batching. job, processing, completed, events: the job's hash and the queue's keys of those
-- names; running, held, order, pending, wake: as lk:release_slot takes them.
-- worker: the worker completing its own job (named in the event), or '' (with events on, the
-- hash's worker_id is then read for the event). now: the scripts' now argument (an override,
-- or '' for the event's entry id or Redis TIME), or a number (a batch's one clock). hint: as
-- release_slot takes it (false when the caller's worker claims next in the same script).
-- Returns DONE, the time it completed at (ms) and whether it gave a limit slot back waking no
-- one (release_slot's answer); DONE and nil for a repeat (the job already completed with this
-- token: nothing written); NOT_FOUND; or STALE_TOKEN and the status.
-- Writes: the `completed` event, the hash (status, result, times, history), its dropped fields,
-- `processing` -> `completed`, and the limit slot given back (includes/common.lua).
local function complete_job(job, processing, completed, events, running, held, order, pending,
    wake, token, result, worker, now, events_cap, wake_cap, hint)
  -- With events on, the event's fields are read in the same HMGET: the type, and the worker's
  -- id unless the caller names it (a worker claiming its next job completes its own). Only
  -- then: a field read is a scan of the hash, and worker_id is at its end, behind the payload.
  -- The type and the slot mark are read always: a job holding a limit slot gives it back.
  local state
  if not events_on(events_cap) or worker ~= '' then
    state = redis.call('HMGET', job, 'status', 'token', 'id', 'history', 'created_at',
      'type', 'slot')
    state[8] = worker
  else
    state = redis.call('HMGET', job, 'status', 'token', 'id', 'history', 'created_at',
      'type', 'slot', 'worker_id')
  end
  local refused = token_refusal(state, token)
  if refused then
    return refused[1], refused[2]
  end
  if state[1] == 'completed' then
    return DONE, nil
  end
  if state[1] ~= 'processing' then
    return STALE_TOKEN, state[1]
  end
  -- The event first: its entry id gives the time (common.lua, stamped), no TIME command.
  now = stamped(now, events, events_cap, 'e', 'completed', 'j', state[3],
    't', state[6] or '', 'w', state[8] or '')
  -- Formatted once: a number given to redis.call is formatted with %.17g on every use.
  local stamp = string.format('%d', now)
  redis.call('HSET', job, 'status', 'completed', 'result', result, 'finished_at', stamp,
    'updated_at', stamp, 'history', history_add(state[4], 'dw', state[5], now))
  -- Nothing reads these once the job is done; without them the hash fits a smaller allocation.
  redis.call('HDEL', job, 'id', 'seq', 'worker_id', 'slot', 'held')
  redis.call('ZREM', processing, state[3])
  redis.call('ZADD', completed, stamp, state[3])
  local unwoken = false
  if state[7] == state[2] then
    slot_lk = slot_lk or limited({running = running, held = held, order = order,
      pending = pending, wake = wake})
    unwoken = slot_lk:release_slot(state[3], state[6], wake_cap, hint)
  end
  return DONE, now, unwoken
end
