#!lua flags=allow-oom
-- list_page: read one page of one queue's state index, strictly after a cursor, in O(log n +
-- page): the page's entries, where the read stopped, and whether entries remain past it.
--
-- Invariant: an index entry (score, member) whose job did not change state keeps its place in
-- the (score, member) order, so a page that starts strictly after the last entry shown never
-- shows it twice nor skips it, whatever moved in between. Where the cursor's entry is still
-- at its score, its rank is where the page starts. Where it left the index (claimed, finished)
-- or moved (the member scored again), its place is counted in O(log n) all the same: the
-- entries on either side of its score (ZCOUNT), plus those at its score that sort before its
-- member, read and compared byte by byte when few share that score (TIE_SCAN); when many do
-- (every pending job of one priority), a probe finds it instead: the cursor's member followed
-- by a NUL byte, added at the cursor's score. Nothing sorts between a member and that probe,
-- so the probe's rank counts the entries at or before the cursor. The probe is removed before
-- the script returns, so no other client ever sees it, and no real entry is touched; it is the
-- one write, and why the script is not read-only.
-- processing is different: its score, the lease deadline, moves on every renewal, so a page
-- by it could show a job twice. Its jobs are bounded by live workers, not by jobs in Redis:
-- this returns each one's (started_at, id) and shared/read/listing.py orders and pages them.
--
-- KEYS[1] -> {ns:queue}:v2:<state>   the state's index zset (pending: score -priority,
--            member <seq>:<id>; processing: id -> lease deadline; others: id -> time, ms)
--
-- ARGV[1] -> job_prefix: job key prefix ({ns:queue}:v2:job:); a listed entry's hash is built from it,
--            inside the same hash tag, to read its type or start time (the one exception to
--            "every key in KEYS": only Redis knows which ids lie after the cursor)
-- ARGV[2] -> order: order: 'asc' (pending, scheduled, retrying: next to run first), 'desc' (newest
--            first), or 'started' (processing: every running job's start time, unordered)
-- ARGV[3] -> after_score: cursor score (an integer), or '' for the first page
-- ARGV[4] -> after_member: cursor member, or '' for the first page
-- ARGV[5] -> limit: page size: the most entries returned
-- ARGV[6] -> budget: the most entries examined with a type filter (at least the page size)
-- ARGV[7] -> job_type: type to match, or '' for every type
--
-- Returns asc/desc: {more, last member, last score, member 1, score 1, member 2, ...}: the
--         entries after the cursor in order (those of the type, with a filter); last: the last
--         entry examined ('' when none), where the next read starts; more: 1 when entries lie
--         past it, else 0. started: {0, '', '', started_at 1, id 1, ...}, one pair per running
--         job (of the type) whose hash says processing.
-- Redis commands without a filter: ZRANGE (+ ZCARD on a full page) on the first page; ZSCORE and
-- Z(REV)RANK more after a cursor. The cursor's entry gone or moved: ZSCORE, ZCOUNT, then a
-- ZCOUNT (and a ZRANGE of the ties when there are any), or ZADD, Z(REV)RANK and ZREM past
-- TIE_SCAN ties. With a type filter: a HGET per entry examined and a ZRANGE per 100. started:
-- ZRANGE and a HMGET per running job.

local index, prefix, order = KEYS[1], ARGV[1], ARGV[2]
local score, member = ARGV[3], ARGV[4]
local limit, budget, wanted = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local CHUNK = 100
-- Past this many entries at the cursor's score, the probe finds its place rather than a read.
local TIE_SCAN = 100

local function id_of(entry)
  -- A pending member is <seq>:<id>; ids hold no colon.
  local colon = string.find(entry, ':', 1, true)
  return colon and string.sub(entry, colon + 1) or entry
end

if order == 'started' then
  local found = {0, '', ''}
  for _, job_id in ipairs(redis.call('ZRANGE', index, 0, -1)) do
    local job = redis.call('HMGET', prefix .. job_id, 'status', 'started_at', 'type')
    if job[1] == 'processing' and job[2] and (wanted == '' or job[3] == wanted) then
      found[#found + 1] = job[2]
      found[#found + 1] = job_id
    end
  end
  return found
end

local rev = order == 'desc'

-- Whether member a sorts before member b as Redis orders them: by bytes (Lua's `<` compares
-- strings by the server's locale).
local function sorts_before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

-- The number of entries before the cursor in this order, its own entry being elsewhere or
-- gone: those beyond its score on the near side, and those at its score that come first.
local function count_before(ties)
  local near = rev and redis.call('ZCOUNT', index, '(' .. score, '+inf')
    or redis.call('ZCOUNT', index, '-inf', '(' .. score)
  if ties == 0 then
    return near
  end
  for _, tied in ipairs(redis.call('ZRANGE', index, score, score, 'BYSCORE')) do
    if (rev and sorts_before(member, tied)) or (not rev and sorts_before(tied, member)) then
      near = near + 1
    end
  end
  return near
end

-- The rank, in this order, of the first entry strictly after the cursor.
local start = 0
if member ~= '' then
  local rank_of = rev and 'ZREVRANK' or 'ZRANK'
  local current = redis.call('ZSCORE', index, member)
  if current and tonumber(current) == tonumber(score) then
    start = redis.call(rank_of, index, member) + 1
  else
    local ties = redis.call('ZCOUNT', index, score, score)
    if ties <= TIE_SCAN then
      start = count_before(ties)
    else
      local probe = member .. '\0'
      redis.call('ZADD', index, score, probe)
      start = redis.call(rank_of, index, probe)
      redis.call('ZREM', index, probe)
    end
  end
end

local function range(from, count)
  if rev then
    return redis.call('ZRANGE', index, from, from + count - 1, 'REV', 'WITHSCORES')
  end
  return redis.call('ZRANGE', index, from, from + count - 1, 'WITHSCORES')
end

local page, last_member, last_score, examined, ended = {}, '', '', 0, false
if wanted == '' then
  page = range(start, limit)
  examined = #page / 2
  ended = examined < limit
  if examined > 0 then
    last_member, last_score = page[#page - 1], page[#page]
  end
else
  local full = false
  while not (ended or full) and examined < budget do
    local count = math.min(CHUNK, budget - examined)
    local entries = range(start + examined, count)
    ended = #entries < 2 * count
    for i = 1, #entries, 2 do
      examined = examined + 1
      last_member, last_score = entries[i], entries[i + 1]
      if redis.call('HGET', prefix .. id_of(entries[i]), 'type') == wanted then
        page[#page + 1] = entries[i]
        page[#page + 1] = entries[i + 1]
        if #page == 2 * limit then
          -- Stopped at a full page: what follows in this chunk is read again next time.
          full, ended = true, false
          break
        end
      end
    end
  end
end

-- Entries lie past the last one examined unless the read ran into the end of the index.
local more = 0
if examined > 0 and not ended and start + examined < redis.call('ZCARD', index) then
  more = 1
end
local reply = {more, last_member, last_score}
for i = 1, #page do
  reply[#reply + 1] = page[i]
end
return reply
