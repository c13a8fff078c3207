"""The scheduler process: promotes due jobs, recovers expired leases, enforces retention.

Every duty is one atomic script that re-checks state, so several schedulers (one per host)
can run at once: each job is promoted or recovered once, and if one scheduler dies the others
carry on. Promotion runs every tick (lateness well under 100 ms); recovery and trimming run
once a second. No pass walks the list of queues, which grows with every name anyone enqueues
under (docs/WORKERD.md, "The scheduler at scale of names"):

- scheduled jobs, which any producer can create in any queue, are found through the due
  index (shared.engine.keys.Keys.due): a tick reads what is due, one ZRANGEBYSCORE, and promotes
  those queues only (Scripts.settle_due keeps the index right, workerd/sweep.py repairs it);
- retries, rate-limit gates, leases and finished jobs arise only where a worker claims, so
  those duties walk the served queues (Keys.served): every host's WORKER_QUEUES, listed by
  its scheduler once a second, kept while they hold anything for those duties after no host
  lists them (a dead host's leases are still recovered). The default queue always counts.

The queues this host serves are also listed again in the list of queues should it have lost
them: a producer lists a queue once per process, so a failover that dropped its SADD, or a
flushed Redis, would otherwise leave that queue out of lookups. Periodic schedules
(TASKFORGE_SCHEDULES) are enqueued by workerd/periodic.py, once a second, outside the
recovery's grace: a tick's job is new work.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence

import redis

from shared.connect.redis_conn import pipe_time
from shared.engine.engine_types import PromoteResult
from shared.engine.lifecycle import Outcome, record
from shared.engine.scripts import Scripts
from shared.model.limit_rules import from_stored
from shared.model.queues import DEFAULT_QUEUE
from shared.model.schedules import Schedule
from shared.obs import metrics, tracing
from workerd.backoff import Backoff
from workerd.children import StopOnSignal
from workerd.periodic import PASS_INTERVAL, Periodic
from workerd.slots import Slot
from workerd.sweep import (
    FINISHED,
    OPEN_GATES_FROM,
    PROMOTE_FROM,
    RECOVER_FROM,
    TRIM_FROM,
    WORKER_MADE,
    Sweep,
)

log = logging.getLogger(__name__)

PROMOTE_INTERVAL = 0.05
RECOVER_INTERVAL = 1.0
# A promote takes about a millisecond. One that took this long hung on Redis (frozen, or cut
# off without a reset) and answered at last: no error surfaced, since redis-py's retries
# outlast such a hang, but the supervisors' lease renewals hung just the same.
HUNG_CALL_SECONDS = 1.0
# Most queues a tick promotes from the due index; more due wait for the next tick (50 ms).
DUE_BATCH = 100
# The keys (shared.engine.keys.Keys attributes) each duty acts on in a served queue (defined once, in
# workerd/sweep.py): it runs for a queue only when one of them exists (an empty zset or hash
# does not). What keeps a queue no host lists any more among the served ones: work only a
# scheduler ends.
SERVED_DUTIES = (*WORKER_MADE, *FINISHED)
# A served queue no scheduler listed for this long is dropped once it holds none of the above
# (a host that still serves it lists it again every second).
SERVED_FOR_MS = 60_000
# Every index a queue that ever had a job holds something in (its events stream included).
ANY_INDEX = ("pending", "held", "scheduled", "retrying", "processing", *TRIM_FROM, "events")


class SchedulerProcess(StopOnSignal):
    """One loop around :meth:`step`, which tests can call directly with their own clock."""

    def __init__(
        self,
        scripts: Scripts,
        slot: Slot,
        parent_pid: int,
        *,
        reconnect_grace: float,
        clock: Callable[[], float] = time.monotonic,
        redis_url: str = "",
        served: Sequence[str] = (),
        schedules: Sequence[Schedule] = (),
    ) -> None:
        self.scripts = scripts
        self.served = tuple(served)  # this host's WORKER_QUEUES, kept on the lists
        self.slot = slot
        self.parent_pid = parent_pid
        # After an outage, leases look expired only because renewals could not reach Redis
        # either; give the supervisors time to renew before recovering anything.
        self.reconnect_grace = reconnect_grace
        self.clock = clock
        self.recover_not_before = 0.0
        self.next_recover = 0.0
        self.periodic = Periodic(scripts, schedules)
        self.next_periodic = 0.0
        self.queues: list[str] = []  # the served queues, as of the last listing (a second)
        self.rated: list[str] = []  # those with a rate limit, as of the last listing
        self.redis_offset_ms = 0  # Redis's clock minus this host's, as of the last listing
        self.sweep = Sweep(scripts)
        self.stopping = False
        self.backoff = Backoff("scheduler", redis_url=redis_url)

    def run(self) -> int:
        """Loop until stopped or orphaned; return the exit code."""
        log.info("scheduler_started")
        while not self.stopping and os.getppid() == self.parent_pid:
            self.slot.beat()
            try:
                self.step(self.clock())
                self._recovered_from_outage()
                time.sleep(PROMOTE_INTERVAL)
            except redis.RedisError as exc:
                self.recover_not_before = float("inf")  # until Redis answers again
                self.backoff.wait(exc)
        log.info("scheduler_stopped")
        tracing.shutdown()
        return 0

    def _recovered_from_outage(self) -> None:
        if self.backoff.failures:
            # This step only promoted (recovery was held back); start the grace now.
            self.recover_not_before = self.clock() + self.reconnect_grace
        self.backoff.succeeded()

    def step(self, now: float, *, now_ms: int | None = None) -> None:
        """Promote due jobs; once a second enqueue periodic ticks, and (outside a reconnect
        grace) recover, trim and sweep."""
        began = self.clock()
        if not self.queues or now >= self.next_recover:
            self.queues = self._listed_queues(now_ms)
            self.rated = self._rate_limited()
        due, retrying = self._due_and_retrying(now_ms)
        for queue in sorted({*due, *retrying}):
            self._promote(queue, now_ms)
        self.scripts.settle_due(due)
        for queue in self._holding(OPEN_GATES_FROM, self.rated):
            self.scripts.open_gates(queue=queue, now_ms=now_ms)
        ended = self.clock()
        if ended - began > HUNG_CALL_SECONDS:
            self.recover_not_before = ended + self.reconnect_grace  # as after an outage
        if now >= self.next_periodic:
            self.next_periodic = now + PASS_INTERVAL
            self.periodic.step(now_ms=now_ms)
        if now >= self.next_recover and now >= self.recover_not_before:
            self.next_recover = now + RECOVER_INTERVAL
            for queue in self._holding(RECOVER_FROM):
                self._recover(queue, now_ms)
            finished = self._holding(TRIM_FROM)
            for queue in finished:
                self.scripts.trim(queue=queue, now_ms=now_ms, share=len(finished))
            self.sweep.step(self.queues, now_ms, share=max(1, len(finished)))

    def _now_ms(self, now_ms: int | None) -> int:
        """Return `now_ms`, or Redis's clock as this host's plus the last measured offset."""
        return now_ms if now_ms is not None else int(time.time() * 1000) + self.redis_offset_ms

    def _due_and_retrying(self, now_ms: int | None) -> tuple[list[str], list[str]]:
        """Return the queues the due index says are due, and the served queues holding
        retries: one round trip, a ZRANGEBYSCORE and an EXISTS per served queue."""
        pipe = self.scripts.redis.pipeline(transaction=False)
        self.scripts.due_queues(pipe, self._now_ms(now_ms), DUE_BATCH)
        for queue in self.queues:
            pipe.exists(*(getattr(self.scripts.q(queue), name) for name in PROMOTE_FROM))
        due, *found = pipe.execute()
        retrying = [q for q, n in zip(self.queues, found, strict=True) if n]
        return [name.decode() for name in due], retrying

    def _holding(self, indexes: tuple[str, ...], queues: Sequence[str] | None = None) -> list[str]:
        """Return the served queues (or `queues`) with anything in `indexes` (one pipelined
        EXISTS each; none asked: no round trip).

        A queue with nothing there has nothing for the duty to do: it costs an EXISTS in one
        shared round trip, not a script call of its own.
        """
        queues = self.queues if queues is None else queues
        if not queues:
            return []
        pipe = self.scripts.redis.pipeline(transaction=False)
        for queue in queues:
            keys = self.scripts.q(queue)
            pipe.exists(*(getattr(keys, name) for name in indexes))
        return [q for q, found in zip(queues, pipe.execute(), strict=True) if found]

    def _rate_limited(self) -> list[str]:
        """Return the served queues whose limits have a rate (a GET of each one's limits).

        Only a claim closes a gate, and only served queues have claims: limits set on any
        other name cost the scheduler nothing.
        """
        pipe = self.scripts.redis.pipeline(transaction=False)
        for queue in self.queues:
            pipe.get(self.scripts.q(queue).limits)
        return [
            q
            for q, raw in zip(self.queues, pipe.execute(), strict=True)
            if raw and not from_stored(raw).rate_free
        ]

    def _listed_queues(self, now_ms: int | None) -> list[str]:
        """Return the served queues, after listing again any this host serves that the list
        of queues lacks, and listing this host's in the served set (shared.engine.keys.Keys.served)."""
        client, keys = self.scripts.redis, self.scripts.keys
        redis_now = self._measure_clock(now_ms)
        if self.served:
            listed = client.smismember(keys.queues, list(self.served))
            missing = [queue for queue, found in zip(self.served, listed, strict=True) if not found]
            for queue in missing:
                self.scripts.register_queue(queue)
            if missing:
                # A queue holding jobs or their events, unlisted, is one the list lost (a
                # failover dropped the producer's SADD): worth a warning. One with nothing is
                # simply new, served before anything was enqueued to it.
                lost = self._holding(ANY_INDEX, missing)
                (log.warning if lost else log.info)("queues_relisted", extra={"queues": missing})
            client.zadd(keys.served, dict.fromkeys(self.served, redis_now))
        return self._served_queues(redis_now)

    def _served_queues(self, redis_now: int) -> list[str]:
        """Return the served set's queues (the default queue always), after dropping those no
        scheduler listed for SERVED_FOR_MS that hold nothing for the per-queue duties."""
        client, keys = self.scripts.redis, self.scripts.keys
        entries = client.zrange(keys.served, 0, -1, withscores=True)
        listed = {name.decode(): score for name, score in entries}
        stale = [q for q, at in listed.items() if at < redis_now - SERVED_FOR_MS]
        if stale:
            busy = set(self._holding(SERVED_DUTIES, stale))
            idle = [q for q in stale if q not in busy]
            if idle:
                client.zrem(keys.served, *idle)
                for queue in idle:
                    del listed[queue]
        return sorted({DEFAULT_QUEUE, *self.served, *listed})

    def _measure_clock(self, now_ms: int | None) -> int:
        """Read Redis's clock (once a second): the due index holds times on it. Returns it."""
        if now_ms is not None:
            return now_ms
        pipe = self.scripts.redis.pipeline(transaction=False)
        pipe_time(pipe, self.scripts.redis, self.scripts.keys.due)  # the index's master's clock
        [(seconds, micros)] = pipe.execute()
        redis_now = seconds * 1000 + micros // 1000
        self.redis_offset_ms = redis_now - int(time.time() * 1000)
        return redis_now

    def _promote(self, queue: str, now_ms: int | None) -> PromoteResult:
        result = self.scripts.promote(queue=queue, now_ms=now_ms)
        keys = self.scripts.q(queue)
        for kind, ids, lateness, types in (
            ("scheduled", result.scheduled, result.scheduled_lateness_ms, result.scheduled_types),
            ("retry", result.retrying, result.retrying_lateness_ms, result.retrying_types),
        ):
            outcome = Outcome.PROMOTED if kind == "scheduled" else Outcome.RETRY_PROMOTED
            traces = tracing.traceparents(self.scripts.redis, keys, ids)
            for job_id, late_ms, job_type, trace in zip(ids, lateness, types, traces, strict=True):
                metrics.observe_lateness(kind, queue, late_ms)
                lateness_ms = {"taskforge.lateness_ms": late_ms}
                record(
                    outcome,
                    job_id,
                    job_type,
                    queue=queue,
                    trace=trace,
                    attributes=lateness_ms,
                    kind=kind,
                    late_ms=late_ms,
                )
        return result

    def _recover(self, queue: str, now_ms: int | None) -> None:
        result = self.scripts.recover(queue=queue, now_ms=now_ms)
        ids = result.requeued + result.dead
        types = result.requeued_types + result.dead_types
        outcomes = [Outcome.RECOVERED] * len(result.requeued)
        outcomes += [Outcome.RECOVERY_CAP] * len(result.dead)
        traces = tracing.traceparents(self.scripts.redis, self.scripts.q(queue), ids)
        for job_id, job_type, outcome, trace in zip(ids, types, outcomes, traces, strict=True):
            reason = "lease expired" if outcome is Outcome.RECOVERED else "recovery cap"
            lease = {"taskforge.reason": "lease"}
            record(
                outcome, job_id, job_type, queue=queue, trace=trace, attributes=lease, reason=reason
            )
        # Asked to stop, then their host died: canceled, not requeued.
        for job_id, job_type in zip(result.canceled, result.canceled_types, strict=True):
            record(Outcome.CANCELED_RUNNING, job_id, job_type, queue=queue, stopped="lost")
