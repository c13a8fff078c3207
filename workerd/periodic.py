"""The scheduler's periodic duty: enqueue one job per tick of each schedule, with no leader.

Every workerd host runs it (in its scheduler process) for the schedules of its
TASKFORGE_SCHEDULES file. A pass reads Redis TIME and every schedule's state in one round trip;
for a schedule with due ticks it enqueues each tick's job under an id derived from (schedule,
tick) through the engine's enqueue, which creates a job once per id, then moves the schedule's
last tick forward with an atomic max (advance_schedule.lua). Two hosts that see the same tick
enqueue the same id: one job. A host killed between the two steps leaves the tick due, and the
next pass, any host's, enqueues the same id again: one job. docs/SCHEDULES.md.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import UTC, datetime

import redis

from shared.connect.redis_conn import pipe_time
from shared.engine.history import Actor
from shared.engine.lifecycle import Outcome, record
from shared.engine.scripts import Scripts
from shared.model import ticks
from shared.model.schedules import Schedule
from shared.obs import metrics
from shared.obs.log import error_text
from shared.read.schedule_state import FIELDS, ScheduleState

log = logging.getLogger(__name__)

PASS_INTERVAL = 1.0  # seconds between passes: a tick's job is enqueued within about a second


def iso(ms: int) -> str:
    """Return epoch milliseconds as ISO-8601 UTC (log fields)."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


class Periodic:
    """One pass over this host's schedules per :meth:`step`; tests call it directly."""

    def __init__(self, scripts: Scripts, schedules: Sequence[Schedule]) -> None:
        self.scripts = scripts
        self.schedules = tuple(schedules)
        self.published = False
        self.listed: set[str] = set()  # queues this process has put on the list of queues
        # name -> (the tick the next is counted from, that next tick): an idle pass computes
        # no cron tick, only compares.
        self.next_due: dict[str, tuple[int, int]] = {}

    def step(self, *, now_ms: int | None = None) -> None:
        """Publish the definitions if Redis lacks them, then enqueue what is due (`now_ms`:
        tests' clock). One round trip when nothing is due: TIME, EXISTS and the states."""
        if not self.schedules:
            return
        if not self.published:
            self.publish()
        keys = self.scripts.keys
        pipe = self.scripts.redis.pipeline(transaction=False)
        pipe_time(pipe, self.scripts.redis, keys.schedules)  # the schedules' master's clock
        # A flushed or failed-over Redis lost them: the API would list nothing.
        pipe.exists(keys.schedules)
        for schedule in self.schedules:
            pipe.hmget(keys.schedule(schedule.name), FIELDS)
        (seconds, micros), listed, *replies = pipe.execute()
        if not listed:
            self.listed.clear()  # the list of queues went with them
            self.publish()
        now = seconds * 1000 + micros // 1000 if now_ms is None else now_ms
        for schedule, reply in zip(self.schedules, replies, strict=True):
            try:
                self._schedule(schedule, ScheduleState.from_reply(reply), now)
            except redis.RedisError:
                raise  # the scheduler's loop backs off and tries again
            except Exception as exc:  # one schedule's fault must not stop the others, nor
                # crash-loop the process that also promotes and recovers every queue's jobs
                log.error(
                    "schedule_failed",
                    extra={"schedule": schedule.name, "error": error_text(exc)},
                )

    def publish(self) -> None:
        """Replace the published definitions with this host's (every host runs the same file)."""
        definitions = [(s.name, json.dumps(s.to_json(), sort_keys=True)) for s in self.schedules]
        self.scripts.publish_schedules(definitions)
        self.published = True
        log.info("schedules_published", extra={"schedules": [s.name for s in self.schedules]})

    def _schedule(self, schedule: Schedule, state: ScheduleState, now: int) -> None:
        name = schedule.name
        if state.last_ms is None:
            # First sight: start from the latest tick, enqueue nothing (no job at deploy).
            self.scripts.advance_schedule(name, ticks.latest_at_or_before(schedule, now), None)
            return
        # Ticks up to a resume are passed, not missed: a pause is never caught up.
        start = max(state.last_ms, state.resumed_ms or 0)
        cached = self.next_due.get(name)
        if cached is None or cached[0] != start:
            cached = (start, ticks.next_after(schedule, start))
            self.next_due[name] = cached
        if cached[1] > now:
            return
        plan = ticks.plan(schedule, start, now)
        if plan is None:
            return
        if state.paused_ms is not None:
            self.scripts.advance_schedule(name, plan.tick_ms, None)
            return
        job_id = None
        for tick in plan.jobs:
            job_id = self._enqueue(schedule, tick)
        moved = self.scripts.advance_schedule(
            name, plan.tick_ms, job_id, missed=plan.missed, jobs=len(plan.jobs)
        )
        if moved and plan.missed:
            metrics.SCHEDULE_MISSED.labels(name).inc(plan.missed)
            log.warning(
                "schedule_missed",
                extra={
                    "schedule": name,
                    "missed": plan.missed,
                    "policy": schedule.missed,
                    "tick": iso(plan.tick_ms),
                    "enqueued": len(plan.jobs),
                },
            )

    def _enqueue(self, schedule: Schedule, tick_ms: int) -> str:
        """Enqueue a tick's job (once per id, whoever else does too); return its id."""
        job = schedule.job
        job_id = ticks.job_id(schedule.name, tick_ms, job.queue)
        if job.queue not in self.listed:
            self.scripts.register_queue(job.queue)
            self.listed.add(job.queue)
        result = self.scripts.enqueue(job, job_id, actor=Actor.SCHEDULER)
        if result.first_in_queue:  # the queue was deleted since it was listed: list it again
            self.scripts.register_queue(job.queue)
        confirmed = result.confirmation is None or result.confirmation.confirmed
        if not result.existed:
            if confirmed:  # durable mode: a failover may still lose it (record warns)
                metrics.SCHEDULE_JOBS.labels(schedule.name).inc()
            record(
                Outcome.ENQUEUED,
                job_id,
                job.type,
                queue=job.queue,
                confirmation=result.confirmation,
                schedule=schedule.name,
                tick=iso(tick_ms),
            )
        return job_id
