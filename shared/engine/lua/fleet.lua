#!lua flags=no-writes
-- fleet: the workerd hosts heard from recently and their live and busy workers, in one read
-- of the global slot (the registry spans queues). O(hosts), never a scan.
--
-- KEYS[1] -> {ns}:v2:workers   zset of workerd supervisors heard from recently
--
-- ARGV[1] -> worker_prefix: worker record prefix ({ns}:v2:worker:); records of ids read from KEYS[1] are
--            built from it, inside the same hash tag
--
-- Returns {hosts, live workers, busy workers, quiet hosts}.

-- A supervisor whose record expired (it went silent) is not counted, even before the registry
-- zset forgets its id at the next heartbeat of any host.
local hosts, live, busy, quiet = 0, 0, 0, 0
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local record = redis.call('HMGET', ARGV[1] .. id, 'workers', 'busy', 'quiet')
  if record[1] then
    hosts = hosts + 1
    live = live + tonumber(record[1])
    busy = busy + (tonumber(record[2]) or 0)
    if record[3] == '1' then
      quiet = quiet + 1
    end
  end
end
return {hosts, live, busy, quiet}
