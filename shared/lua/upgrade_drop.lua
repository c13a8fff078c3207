#!lua flags=allow-oom
-- upgrade_drop: forget staged v1 jobs once their v2 copy is written (upgrade_copy answered).
--
-- Invariant: only a staged hash is deleted, never a job in a v1 index: by then the job lives in
-- v2, so dropping its staged original ends its move. Repeating the call deletes nothing more.
--
-- KEYS[1] -> {v1}upgrade:moving          hash, id -> where the job was indexed
-- KEYS[2..n] -> {v1}upgrade:job:<id>     the staged hashes, in the order of the ids below
--
-- ARGV[1..n] -> the job ids, one per staged hash
--
-- Returns the number of staged hashes deleted.
-- Redis commands: 2 per job (DEL, HDEL).

local dropped = 0
for i = 2, #KEYS do
  dropped = dropped + redis.call('DEL', KEYS[i])
  redis.call('HDEL', KEYS[1], ARGV[i - 1])
end
return dropped
