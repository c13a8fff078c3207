"""Tick arithmetic of periodic schedules: pure functions of a schedule and a clock (ms).

Every scheduler computes the same ticks from the same clock, Redis TIME: an interval's ticks
are the multiples of the interval since the epoch; a cron schedule's are cronsim's in the
schedule's zone, as epoch milliseconds (so a tick is one instant, whatever the wall clock did).
A tick's job id is derived from (schedule, tick), so every scheduler enqueues the same job
for it and the engine's enqueue, repeat-safe by id, makes one (docs/SCHEDULES.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from cronsim import CronSim

from shared.model.job_ids import tagged_uuid
from shared.model.queues import DEFAULT_QUEUE
from shared.model.schedules import Schedule

# A due tick is on time while it is at most this old: the gap to the tick after it, held
# between GRACE_FLOOR_MS (a pass or two late: the scheduler's pass runs about once a second)
# and GRACE_MS (a minute). On-time ticks get their jobs; older ones are missed (an outage).
GRACE_MS = 60_000
GRACE_FLOOR_MS = 5_000
# Due ticks counted one by one at most (a cron schedule down for a week): beyond, the latest
# is found backwards and the count says "at least".
COUNT_CAP = 10_000


@dataclass(frozen=True)
class Plan:
    """What a pass does for one schedule whose ticks in (last, now] are due."""

    tick_ms: int  # the latest due tick: the schedule's "last" advances to it
    jobs: tuple[int, ...]  # the due ticks that get a job, in order (the latest is tick_ms)
    missed: int  # due ticks that get no job of their own


def job_id(name: str, tick_ms: int, queue: str = DEFAULT_QUEUE) -> str:
    """Return the job id of a schedule's tick in `queue`: a UUIDv4 from (name, tick).

    Laid out as v4, its first 32 bits its queue's tag (shared.model.job_ids), so every id check of
    the API and the dashboard takes it and a lookup finds its queue; its other bits come from
    SHA-256, not a random source, so it is the same on every host.
    """
    return tagged_uuid(queue, hashlib.sha256(f"schedule\0{name}\0{tick_ms}".encode()).digest())


def _aware(schedule: Schedule, ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, schedule.zone)


def ticks_after(schedule: Schedule, after_ms: int) -> Iterator[int]:
    """Yield the schedule's ticks strictly after `after_ms`, in order (epoch ms)."""
    if schedule.every_ms is not None:
        tick = (after_ms // schedule.every_ms + 1) * schedule.every_ms
        while True:
            yield tick
            tick += schedule.every_ms
    assert schedule.cron is not None
    # Whole seconds: cronsim drops the fraction, and a tick is always on a whole second.
    start = _aware(schedule, after_ms - after_ms % 1000)
    last = after_ms
    for moment in CronSim(schedule.cron, start):
        tick = int(moment.timestamp()) * 1000
        # In a repeated (fall-back) hour cronsim works on wall-clock times and may answer a
        # time before the start, or one instant twice: a tick is yielded once, in order.
        if tick > last:
            last = tick
            yield tick


def latest_at_or_before(schedule: Schedule, now_ms: int) -> int:
    """Return the schedule's latest tick at or before `now_ms`."""
    if schedule.every_ms is not None:
        return now_ms // schedule.every_ms * schedule.every_ms
    assert schedule.cron is not None
    # Half a second in: cronsim then takes the whole second itself as its first candidate.
    start = _aware(schedule, now_ms - now_ms % 1000 + 500)
    for moment in CronSim(schedule.cron, start, reverse=True):
        tick = int(moment.timestamp()) * 1000
        if tick <= now_ms:
            return tick
    raise ValueError(f"schedule {schedule.name!r} has no tick before {now_ms}")  # pragma: no cover


def next_after(schedule: Schedule, after_ms: int) -> int:
    """Return the schedule's first tick strictly after `after_ms`."""
    return next(ticks_after(schedule, after_ms))


def next_runs(schedule: Schedule, now_ms: int, count: int) -> list[datetime]:
    """Return the next `count` ticks after `now_ms` as aware datetimes in the schedule's zone."""
    ticks = ticks_after(schedule, now_ms)
    return [_aware(schedule, next(ticks)) for _ in range(count)]


def grace_ms(schedule: Schedule, tick_ms: int) -> int:
    """Return how late a tick may run and still be on time (GRACE_FLOOR_MS..GRACE_MS)."""
    gap = next_after(schedule, tick_ms) - tick_ms
    return min(GRACE_MS, max(GRACE_FLOOR_MS, gap))


def _count(schedule: Schedule, after_ms: int, until_ms: int) -> int:
    """Return how many ticks fall in (after, until], counted up to COUNT_CAP."""
    if until_ms <= after_ms:
        return 0
    if schedule.every_ms is not None:
        every = schedule.every_ms
        return until_ms // every - after_ms // every
    count = 0
    for tick in ticks_after(schedule, after_ms):
        if tick > until_ms or count == COUNT_CAP:
            break
        count += 1
    return count


def plan(schedule: Schedule, last_ms: int, now_ms: int) -> Plan | None:
    """Return what to do for the ticks in (last, now], or None when none is due.

    The due ticks still on time (grace_ms) each get a job: a pass a little late loses none.
    Older ones are missed: ``skip`` drops them; ``catch_up`` enqueues one job, for the latest
    due tick, when none is on time. So an outage of any length ends in at most one job (or the
    few on time), never a flood. A clock that went back (now < last) has nothing due.
    """
    if now_ms <= last_ms:
        return None
    latest = latest_at_or_before(schedule, now_ms)
    if latest <= last_ms:
        return None
    window = max(last_ms, now_ms - grace_ms(schedule, latest) - 1)  # later ticks: on time
    jobs: list[int] = []
    for tick in ticks_after(schedule, window):
        if tick > now_ms:
            break
        jobs.append(tick)
    missed = _count(schedule, last_ms, window)
    if missed and not jobs and schedule.missed == "catch_up":
        return Plan(latest, (latest,), missed - 1)
    return Plan(latest, tuple(jobs), missed)
