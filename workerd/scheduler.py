"""The scheduler process: promotes due jobs, recovers expired leases, enforces retention.

Every duty is one atomic script that re-checks state, so several schedulers (one per host)
can run at once: each job is promoted or recovered once, and if one scheduler dies the others
carry on. Promotion runs every tick (lateness well under 100 ms); recovery and trimming run
once a second. Each duty runs once per queue (a script touches one queue's slot); the list of
queues is read again once a second, so a new queue is served within a second. The queues this
host serves (WORKER_QUEUES) are listed again should the list have lost them: a producer lists a
queue once per process, so a failover that dropped its SADD, or a flushed Redis, would
otherwise leave that queue's retries unpromoted, its leases unrecovered and its completed
jobs untrimmed for good. Jobs still under layout v1 (an old gateway's, in a rolling upgrade)
move into v2 by workerd/v1_drain.py, at the recovery's pace and under its grace: a v1 lease
looks expired after an outage too. Periodic schedules (TASKFORGE_SCHEDULES) are enqueued by
workerd/periodic.py, once a second, outside the recovery's grace: a tick's job is new work.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence

import redis

from shared import metrics, tracing
from shared.lifecycle import Outcome, record
from shared.limits import from_stored
from shared.schedules import Schedule
from shared.scripts import PromoteResult, Scripts
from shared.upgrade import Upgrade
from workerd.backoff import Backoff
from workerd.children import StopOnSignal
from workerd.periodic import PASS_INTERVAL, Periodic
from workerd.slots import Slot
from workerd.v1_drain import V1Drain

log = logging.getLogger(__name__)

PROMOTE_INTERVAL = 0.05
RECOVER_INTERVAL = 1.0
# A promote takes about a millisecond. One that took this long hung on Redis (frozen, or cut
# off without a reset) and answered at last: no error surfaced, since redis-py's retries
# outlast such a hang, but the supervisors' lease renewals hung just the same.
HUNG_CALL_SECONDS = 1.0
# The keys (shared.keys.Keys attributes) each duty acts on: it runs for a queue only when one
# of them exists (an empty zset or hash does not).
PROMOTE_FROM = ("scheduled", "retrying")
# Rate-limit gates (docs/QUEUES.md, limits): checked every tick, of queues with a rate only.
OPEN_GATES_FROM = ("gates",)
RECOVER_FROM = ("processing",)
TRIM_FROM = ("completed", "canceled", "dead", "failures")
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
        self.served = tuple(served)  # this host's WORKER_QUEUES, kept on the list
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
        self.queues: list[str] = []
        self.rated: list[str] = []  # queues with a rate limit, as of the last listing (a second)
        self.stopping = False
        self.backoff = Backoff("scheduler", redis_url=redis_url)
        self.v1_drain = V1Drain(
            Upgrade(scripts.redis, scripts.keys, wake_cap=scripts.policy.wake_cap)
        )

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
        grace) recover and trim."""
        began = self.clock()
        if not self.queues or now >= self.next_recover:
            self.queues = self._listed_queues()
            self.rated = self._rate_limited()
        for queue in self._holding(PROMOTE_FROM):
            self._promote(queue, now_ms)
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
            for queue in self._holding(TRIM_FROM):
                self.scripts.trim(queue=queue, now_ms=now_ms)
            self.v1_drain.tick(now, now_ms)

    def _holding(self, indexes: tuple[str, ...], queues: Sequence[str] | None = None) -> list[str]:
        """Return the listed queues (or `queues`) with anything in `indexes` (one pipelined
        EXISTS each).

        A queue with nothing there has nothing for the duty to do: an idle queue costs an
        EXISTS in one shared round trip, not a script call of its own, however many queues
        are listed (a name stays listed once a job was enqueued under it). Gates are asked of
        the queues found rate-limited at the last listing only (none: no round trip).
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
        """Return the queues whose limits have a rate: the list of limited queues (one
        SMEMBERS, none with no limits anywhere), then a GET of each one's limits."""
        client = self.scripts.redis
        limited = sorted(name.decode() for name in client.smembers(self.scripts.keys.limited))
        if not limited:
            return []
        pipe = client.pipeline(transaction=False)
        for queue in limited:
            pipe.get(self.scripts.q(queue).limits)
        return [
            q
            for q, raw in zip(limited, pipe.execute(), strict=True)
            if raw and not from_stored(raw).rate_free
        ]

    def _listed_queues(self) -> list[str]:
        """Return the list of queues, after listing again any this host serves that it lacks."""
        listed = self.scripts.queue_names()
        missing = [queue for queue in self.served if queue not in listed]
        if not missing:
            return listed
        for queue in missing:
            self.scripts.register_queue(queue)
        # A queue holding jobs or their events, unlisted, is one the list lost (a failover
        # dropped the producer's SADD): worth a warning. One with nothing is simply new, served
        # before anything was enqueued to it, as on a fresh deployment.
        lost = self._holding(ANY_INDEX, missing)
        (log.warning if lost else log.info)("queues_relisted", extra={"queues": missing})
        return sorted({*listed, *missing})

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
