"""Reads of the periodic schedules' state in Redis: what the scheduler and the gateway see.

Writes go through the scripts (advance_schedule, pause_schedule, resume_schedule,
publish_schedules in shared.engine.scripts); these are plain reads, pipelined: the scheduler's idle
pass is this one round trip for every schedule (Redis TIME with it: the ticks' clock).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import redis

from shared.connect.redis_conn import pipe_time
from shared.engine.keys import Keys
from shared.engine.replies import text
from shared.model import ticks
from shared.model.schedules import Schedule, ScheduleError, from_json

FIELDS = ("last", "job", "job_tick", "paused", "resumed", "jobs", "missed")
NEXT_RUNS = 5  # next run times the API and the dashboard show per schedule


@dataclass(frozen=True)
class ScheduleState:
    """One schedule's state: its last tick (ms) and that tick's job, pause, counts."""

    last_ms: int | None = None
    job_id: str | None = None
    job_tick_ms: int | None = None
    paused_ms: int | None = None
    resumed_ms: int | None = None
    jobs: int = 0
    missed: int = 0

    @classmethod
    def from_reply(cls, values: Sequence[bytes | None]) -> ScheduleState:
        """Return the state from an HMGET of FIELDS."""
        last, job, job_tick, paused, resumed, jobs, missed = (text(v) for v in values)
        return cls(
            last_ms=_int(last),
            job_id=job,
            job_tick_ms=_int(job_tick),
            paused_ms=_int(paused),
            resumed_ms=_int(resumed),
            jobs=_int(jobs) or 0,
            missed=_int(missed) or 0,
        )


def _int(value: str | None) -> int | None:
    return None if value is None else int(value)


def read_states(
    client: redis.Redis, keys: Keys, names: Sequence[str]
) -> tuple[int, list[ScheduleState]]:
    """Return Redis's clock (ms) and the state of each named schedule, in one round trip."""
    pipe = client.pipeline(transaction=False)
    pipe_time(pipe, client, keys.schedules)  # the schedules' master's clock
    for name in names:
        pipe.hmget(keys.schedule(name), FIELDS)
    (seconds, micros), *replies = pipe.execute()
    return seconds * 1000 + micros // 1000, [ScheduleState.from_reply(r) for r in replies]


def published(client: redis.Redis, keys: Keys) -> dict[str, Schedule]:
    """Return the published definitions by name (sorted); one that no longer parses is left out.

    A definition is validated again as it is read: a gateway older or newer than the workerd
    that published it may disagree about a field, and a listing must not fail over it.
    """
    found: dict[str, Schedule] = {}
    for name, raw in sorted(client.hgetall(keys.schedules).items()):
        try:
            schedule = from_json(raw)
        except (ScheduleError, ValueError, KeyError):
            continue
        found[text(name) or ""] = schedule
    return found


@dataclass(frozen=True)
class ScheduleView:
    """A published schedule with its state and next runs, as the API and the dashboard show it."""

    schedule: Schedule
    state: ScheduleState
    next_runs: list[datetime]


def view_schedules(
    client: redis.Redis, keys: Keys, *, name: str | None = None, count: int = NEXT_RUNS
) -> list[ScheduleView]:
    """Return the published schedules (or the one named) with state and next runs after now.

    Two round trips: the definitions, then Redis TIME with every state. The next runs come
    from the same tick arithmetic the schedulers use (shared.model.ticks), in each schedule's zone.
    """
    schedules = published(client, keys)
    if name is not None:
        schedules = {name: schedules[name]} if name in schedules else {}
    if not schedules:
        return []
    now_ms, states = read_states(client, keys, list(schedules))
    return [
        ScheduleView(schedule, state, ticks.next_runs(schedule, now_ms, count))
        for schedule, state in zip(schedules.values(), states, strict=True)
    ]
