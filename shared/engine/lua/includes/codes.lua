-- Return codes shared by every script; shared/engine/scripts/ maps them once to the Code enum.
local EMPTY = 0          -- nothing to do (no claimable job)
local DONE = 1           -- the transition happened (or had already happened for this request)
local DUPLICATE = 2      -- enqueue: the idempotency key already names a job for this request
local RETRYING = 3       -- fail: the job waits out its backoff in the retrying set
local DEAD = 4           -- fail/release: the job is dead and in the DLQ
local PAUSED = 5         -- claim: the queue is paused; nothing was claimed
local NOT_RUNNABLE = 6   -- claim: the next job's type is not one the worker runs; left in place
local CANCELED = 7       -- a running job whose cancel was requested ended canceled (not retried)
local CANCEL_ASKED = 8   -- renew: the lease is extended, and a cancel of the job was requested
local NOT_FOUND = -1     -- no such job
local WRONG_STATE = -2   -- the job is not in a state this transition starts from
local STALE_TOKEN = -3   -- the caller's fencing token is not the job's current one
local CONFLICT = -4      -- enqueue: the idempotency key names a job for a different request
