"""Redis key names: the only place they are formatted.

The layout (docs/QUEUES.md): every queue's keys share one Redis Cluster hash tag, its own, so
a Cluster can put queues on different shards while every script still touches one slot:

    {taskforge:<queue>}:v2:pending, …:job:<id>, …   one queue's jobs and indexes
    {taskforge}:v2:workers, …:queues, …:idem:<key>  what spans queues (the global slot)

No script reads keys of both kinds: the worker registry, the list of queues and the
idempotency keys are written by calls of their own (shared.engine.scripts says which, and why).
Every name carries the segment ``v2``: renaming it would strand every key already written.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from shared.model.queues import DEFAULT_QUEUE

JOB_KEY_INFIX = "job:"
VERSION = "v2"


@dataclass(frozen=True)
class Keys:
    """Builds every key name of one namespace; the per-queue ones for `queue`."""

    namespace: str = "taskforge"
    queue: str = DEFAULT_QUEUE

    def for_queue(self, queue: str) -> Keys:
        """Return the key builder of another queue in the same namespace."""
        return self if queue == self.queue else replace(self, queue=queue)

    @cached_property
    def prefix(self) -> str:
        """Return the prefix of this queue's keys: its own hash tag, then the version."""
        return f"{{{self.namespace}:{self.queue}}}:{VERSION}:"

    @cached_property
    def global_prefix(self) -> str:
        """Return the prefix of the keys that span queues (one slot of their own)."""
        return f"{{{self.namespace}}}:{VERSION}:"

    # --- one queue -------------------------------------------------------------------------

    def job(self, job_id: str) -> str:
        """Return the hash that holds one job's metadata."""
        return f"{self.prefix}{JOB_KEY_INFIX}{job_id}"

    @property
    def job_prefix(self) -> str:
        """Return the prefix scripts use to build job keys for ids they pop from an index."""
        return f"{self.prefix}{JOB_KEY_INFIX}"

    @property
    def pending(self) -> str:
        """Return the zset of claimable jobs: score -priority, member ``<seq>:<id>``."""
        return f"{self.prefix}pending"

    @property
    def pending_since(self) -> str:
        """Return the zset of claimable job ids scored by when they became claimable (ms)."""
        return f"{self.prefix}pending_since"

    @property
    def seq(self) -> str:
        """Return the counter that orders equal priorities first-in, first-out."""
        return f"{self.prefix}seq"

    @property
    def processing(self) -> str:
        """Return the zset of running job ids scored by lease deadline (ms)."""
        return f"{self.prefix}processing"

    @property
    def scheduled(self) -> str:
        """Return the zset of job ids waiting for their ``scheduled_at`` (ms)."""
        return f"{self.prefix}scheduled"

    @property
    def retrying(self) -> str:
        """Return the zset of job ids waiting out their retry backoff (ms)."""
        return f"{self.prefix}retrying"

    @property
    def completed(self) -> str:
        """Return the zset of completed job ids scored by finish time (ms)."""
        return f"{self.prefix}completed"

    @property
    def canceled(self) -> str:
        """Return the zset of canceled job ids scored by cancel time (ms)."""
        return f"{self.prefix}canceled"

    @property
    def dead(self) -> str:
        """Return the dead-letter queue: job ids scored by time of death (ms)."""
        return f"{self.prefix}dead"

    @property
    def wake(self) -> str:
        """Return the capped list of wake-up hints that this queue's idle workers block on."""
        return f"{self.prefix}wake"

    @property
    def paused(self) -> str:
        """Return the flag that pauses the queue: present, no claim takes from it (value: since, ms).

        Enqueue and promote ignore it (jobs still arrive and become pending); claim.lua and
        complete.lua's claim part answer PAUSED instead of taking a job (docs/QUEUES.md).
        """
        return f"{self.prefix}paused"

    @property
    def failures(self) -> str:
        """Return the hash of failed executions per second: second (epoch s) -> count.

        fail.lua adds one per failure; trim.lua forgets seconds past the last minute; /queues
        reads the last 60.
        """
        return f"{self.prefix}failures"

    @property
    def events(self) -> str:
        """Return the capped stream of this queue's job and queue events on a Redis Cluster.

        Appended by the script that makes each transition (XADD MAXLEN ~ the cap, auto ids),
        in the queue's slot like every key that script touches; GET /events reads it. On one
        Redis every queue writes ``fleet_events`` instead (docs/EVENTS.md, "Streams").
        """
        return f"{self.prefix}events"

    @property
    def throughput(self) -> str:
        """Return the hash of completions and failures per minute over the last hour.

        Fields ``c:<epoch minute>`` and ``f:<epoch minute>`` (counts) and ``mark`` (ms, what
        they cover): trim.lua rolls the completed index and the failures hash into it before
        forgetting them; shared/read/throughput.py reads it (throughput.lua).
        """
        return f"{self.prefix}throughput"

    @property
    def limits(self) -> str:
        """Return the string holding the queue's concurrency and rate limits (JSON; absent: none).

        Read by claim.lua in the MGET that reads the paused flag, so an unlimited queue pays
        no command for it (docs/QUEUES.md, "Concurrency and rate limits"; shared/engine/limits.py
        writes it).
        """
        return f"{self.prefix}limits"

    @property
    def running(self) -> str:
        """Return the zset of the jobs holding a limit slot: score 0, member ``<type>|<id>``.

        A claim in a limited queue adds the job, every exit from processing removes it (the
        slot is the lease's), so per-type counts are a ZLEXCOUNT and the queue's a ZCARD.
        """
        return f"{self.prefix}running"

    @property
    def held(self) -> str:
        """Return the zset of pending jobs held back by a type's limit (score 0, lex order).

        Member ``<type>|<10-digit 2^31 - priority>|<seq>:<id>``: a type's best job first.
        """
        return f"{self.prefix}held"

    @property
    def held_order(self) -> str:
        """Return the zset of the same held jobs in claim order, as pending scores them.

        Score -priority, member ``<seq>:<id>``: GET /jobs?state=pending pages it beside
        ``pending`` (shared/read/listing.py), so a held job is listed where it waits.
        """
        return f"{self.prefix}held_order"

    @property
    def buckets(self) -> str:
        """Return the hash of rate-limit token buckets: scope -> ``<tokens>|<updated ms>``."""
        return f"{self.prefix}buckets"

    @property
    def gates(self) -> str:
        """Return the zset of rate-limit scopes out of tokens, scored by the next token (ms).

        The scheduler's promote pass opens a due gate: held jobs back to pending, hints pushed.
        """
        return f"{self.prefix}gates"

    def tombstone(self, job_id: str) -> str:
        """Return the short-lived marker a purge leaves so a repeated purge still succeeds."""
        return f"{self.prefix}purged:{job_id}"

    def reply(self, request_id: str) -> str:
        """Return the key that keeps a batch script's answer for a repeated call (15 s)."""
        return f"{self.prefix}reply:{request_id}"

    def last_claim(self, worker_id: str) -> str:
        """Return the key that makes a worker's repeated claim call return the same job.

        Written by a claim on its own (claim.lua); a complete that claims the next job needs
        none (its token tells a repeat), so only scripts may read it.
        """
        return f"{self.prefix}claim:{worker_id}"

    def state_index(self, state: str) -> str:
        """Return the index key that holds this queue's jobs of one state."""
        return f"{self.prefix}{state}"

    # --- across queues (the global slot) ---------------------------------------------------

    @property
    def queues(self) -> str:
        """Return the set of every queue name a job was ever enqueued under."""
        return f"{self.global_prefix}queues"

    @property
    def limited(self) -> str:
        """Return the set of queue names that have limits (or had: a clear removes its name after).

        Listed before the queue's limits are written (shared.engine.scripts.Scripts.set_limits), as a
        queue is listed before its first job, so every limited queue is found with one
        SMEMBERS. (The scheduler reads the limits of the served queues only: workerd/scheduler.py.)
        """
        return f"{self.global_prefix}limited"

    @property
    def summary(self) -> str:
        """Return the string holding the totals of every queue, as the last sweep found them.

        JSON written by shared.read.summary (not by a script): what the overview, /stats and
        /metrics show for all queues without reading each queue per request.
        """
        return f"{self.global_prefix}summary"

    @property
    def summary_lock(self) -> str:
        """Return the key one process holds (SET NX PX) while it sweeps for the summary."""
        return f"{self.global_prefix}summary_lock"

    def idempotency(self, key: str) -> str:
        """Return the hash that remembers which job (and queue) an ``Idempotency-Key`` made."""
        return f"{self.global_prefix}idem:{key}"

    @property
    def ui_secret(self) -> str:
        """Return the string holding the dashboard's session-signing key (random, set once)."""
        return f"{self.global_prefix}ui_secret"

    @property
    def fleet_events(self) -> str:
        """Return the global capped events stream (docs/EVENTS.md, "Streams").

        On one Redis (and Sentinel) every event: each queue's job and queue events, appended by
        the transition scripts, and the hosts' (joined, left, quiet, resumed) by heartbeat.lua.
        On a Redis Cluster the hosts' only, in the global slot heartbeat.lua writes.
        """
        return f"{self.global_prefix}events"

    @property
    def durable_marker(self) -> str:
        """Return the pub/sub channel of durable mode's marker (shared.engine.durable): no key, and
        nobody subscribes; a PUBLISH there only moves the replication offset WAIT waits for."""
        return f"{self.global_prefix}durable"

    @property
    def slot_marker(self) -> str:
        """Return durable mode's marker on a Redis Cluster (shared.engine.durable): a string in this
        queue's slot, SET (with an expiry) before each WAIT there and never read."""
        return f"{self.prefix}durable_marker"

    @property
    def global_slot_marker(self) -> str:
        """Return durable mode's marker in the global slot (an idempotency key's) on a
        Redis Cluster: as :attr:`slot_marker`."""
        return f"{self.global_prefix}durable_marker"

    @property
    def schedules(self) -> str:
        """Return the hash of the periodic schedules' definitions: name -> JSON (docs/SCHEDULES.md).

        Replaced whole by each workerd that starts with a TASKFORGE_SCHEDULES file
        (publish_schedules.lua); the gateway reads it to list them.
        """
        return f"{self.global_prefix}schedules"

    def schedule(self, name: str) -> str:
        """Return the hash of one schedule's state: last tick, its job, paused and resumed (ms)."""
        return f"{self.global_prefix}schedule:{name}"

    @property
    def workers(self) -> str:
        """Return the zset of worker ids scored by last heartbeat (ms)."""
        return f"{self.global_prefix}workers"

    @property
    def worker_prefix(self) -> str:
        """Return the prefix the stats script builds worker record keys from."""
        return f"{self.global_prefix}worker:"

    def worker(self, worker_id: str) -> str:
        """Return the hash describing one worker process."""
        return f"{self.global_prefix}worker:{worker_id}"

    @property
    def due(self) -> str:
        """Return the zset of queues holding scheduled jobs: queue -> earliest scheduled_at (ms).

        The scheduler's tick reads what is due here (one ZRANGEBYSCORE, whatever the number of
        queues). A producer adds with ZADD LT after the script that scheduled a job (no script
        writes two slots); the scheduler removes an entry, then looks at the queue again and
        puts back what it finds (Scripts.settle_due): the order keeps either side from losing
        the other's entry. workerd/sweep.py repairs one a crash lost in between.
        """
        return f"{self.global_prefix}due"

    @property
    def served(self) -> str:
        """Return the zset of queues some host serves: queue -> last listed by a scheduler (ms).

        Only a worker claims, fails or holds a lease, so retries, rate gates, leases and
        finished jobs arise in these queues alone: the scheduler's per-queue duties walk this
        set, bounded by configuration (every host's WORKER_QUEUES), not by the names anyone
        creates. An entry no host lists any more stays until its queue holds nothing for
        those duties (a dead host's leases are still recovered, its finished jobs trimmed).
        """
        return f"{self.global_prefix}served"

    def auth_failures(self, client: str) -> str:
        """Return the counter of failed logins and bearer tokens from one client address
        (gateway/lockout.py); it expires with its window."""
        return f"{self.global_prefix}auth_failures:{client}"

    def ui_session(self, session_id: str) -> str:
        """Return the record of one logged-in dashboard session: logout deletes it, so a
        copied cookie stops working (gateway/ui/security.py)."""
        return f"{self.global_prefix}ui_session:{session_id}"

    def queue_tag(self, tag: str) -> str:
        """Return the set of the queue names whose job ids begin with `tag` (shared.model.job_ids).

        Written with the list of queues, in the same MULTI (shared.engine.scripts.Scripts.register_queue),
        and emptied with it when a queue is deleted: a lookup by id reads one of these sets
        instead of trying every queue. Usually one name; two when their tags collide.
        """
        return f"{self.global_prefix}queue_tag:{tag}"
