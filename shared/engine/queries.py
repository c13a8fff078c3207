"""Read-only views of the engine's state: one job, DLQ pages, and the shape of its counts."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from shared.connect.redis_conn import read_each
from shared.engine.keys import Keys
from shared.model.jobs import Job, JobState

CURSOR_PATTERN = re.compile(r"([0-9]{1,16})-([0-9a-f-]{36})")


class BadCursor(ValueError):
    """A DLQ cursor that this module did not produce."""


@dataclass(frozen=True)
class QueueCounts:
    """Jobs per state, read from the state indexes in one round trip (each O(1))."""

    by_state: dict[JobState, int]
    oldest_pending_age_ms: int | None
    # Each queue's own counts, when these are the sum of several queues.
    by_queue: dict[str, QueueCounts] = field(default_factory=dict)
    # One queue's: paused since (ms on Redis's clock; None when not paused). Both queues' and
    # a sum's: executions completed and failed in the last minute (queue_stats.lua says how).
    paused_since_ms: int | None = None
    completed_last_minute: int = 0
    failed_last_minute: int = 0

    @property
    def paused(self) -> bool:
        """Tell whether the queue is paused (a sum of several queues never is)."""
        return self.paused_since_ms is not None

    @property
    def total(self) -> int:
        """Return the number of jobs Redis holds in any state."""
        return sum(self.by_state.values())

    @classmethod
    def combined(cls, by_queue: dict[str, QueueCounts]) -> QueueCounts:
        """Return the counts of several queues added up (the oldest age: the oldest of all)."""
        ages = [
            c.oldest_pending_age_ms
            for c in by_queue.values()
            if c.oldest_pending_age_ms is not None
        ]
        return cls(
            {state: sum(c.by_state[state] for c in by_queue.values()) for state in JobState},
            oldest_pending_age_ms=max(ages) if ages else None,
            by_queue=by_queue,
            completed_last_minute=sum(c.completed_last_minute for c in by_queue.values()),
            failed_last_minute=sum(c.failed_last_minute for c in by_queue.values()),
        )


@dataclass(frozen=True)
class WorkerCounts:
    """workerd hosts in the registry, and their live and busy worker processes."""

    hosts: int
    live: int
    busy: int
    quiet: int = 0  # hosts told to claim nothing more (SIGTSTP or the API)


@dataclass(frozen=True)
class DeadPage:
    """One page of the DLQ, newest first, and the cursor of the next page (None at the end)."""

    jobs: list[Job]
    next_cursor: str | None


def get_job(
    client: redis.Redis, keys: Keys, job_id: str, queues: Sequence[str] | None = None
) -> Job | None:
    """Return one job, or None if it does not exist.

    A read where the queue is known: it tries each of `queues` (default: only `keys`'s
    queue) in one pipelined round trip, one HGETALL per queue. To find a job by its id
    alone, use shared.engine.job_locator (the only place an id is resolved to its queue).
    """
    names = list(queues) if queues is not None else [keys.queue]
    found = first_found(client, names, lambda name: _hgetall(keys.for_queue(name).job(job_id)))
    return Job.from_hash(found[1], job_id, found[0]) if found is not None else None


def first_found(
    client: redis.Redis, names: Sequence[str], read: Callable[[str], Callable[[Any], Any]]
) -> tuple[str, Any] | None:
    """Queue `read(name)` for each of `names` (redis_conn.read_each: one pipeline); return
    the first name whose reply is not empty, with that reply, or None when none is.

    A cluster master that did not answer may hold what was looked for: with nothing found
    elsewhere, its error is raised rather than None answered.
    """
    failed = None
    for name, reply in zip(names, read_each(client, [read(name) for name in names]), strict=True):
        if isinstance(reply, Exception):
            failed = reply
        elif reply:
            return name, reply
    if failed is not None:
        raise failed
    return None


def _hgetall(key: str) -> Callable[[Any], Any]:
    return lambda pipe: pipe.hgetall(key)


def get_jobs(
    client: redis.Redis, keys: Keys, located: Sequence[tuple[str, str]]
) -> list[Job | None]:
    """Return each of several jobs given as (id, queue), None for one that does not exist.

    One pipelined round trip, one HGETALL per job, answered in the order given.
    """
    pipe = client.pipeline(transaction=False)
    for job_id, queue in located:
        pipe.hgetall(keys.for_queue(queue).job(job_id))
    return [
        Job.from_hash(raw, job_id, queue) if raw else None
        for (job_id, queue), raw in zip(located, pipe.execute(), strict=True)
    ]


def _parse_cursor(cursor: str) -> tuple[int, str]:
    match = CURSOR_PATTERN.fullmatch(cursor)
    if not match:
        raise BadCursor("cursor is not one this server returned")
    return int(match.group(1)), match.group(2)


def _dead_after(
    client: redis.Redis, keys: Keys, limit: int, cursor: tuple[int, str] | None
) -> list[tuple[float, str, str]]:
    """Return up to `limit` of one queue's dead entries after `cursor`, newest first."""
    # Ties in time of death are ordered by id (descending, as ZREVRANGEBYSCORE does), so a
    # cursor is (time, id): first the rest of that millisecond, then strictly older ones.
    if cursor is None:
        entries = client.zrevrangebyscore(keys.dead, "+inf", "-inf", 0, limit, withscores=True)
    else:
        score, last_id = cursor
        ties = client.zrevrangebyscore(keys.dead, score, score, withscores=True)
        entries = [(m, s) for m, s in ties if m.decode() < last_id][:limit]
        if len(entries) < limit:
            entries += client.zrevrangebyscore(
                keys.dead, f"({score}", "-inf", 0, limit - len(entries), withscores=True
            )
    return [(score, member.decode(), keys.queue) for member, score in entries]


def dead_page(
    client: redis.Redis,
    keys: Keys,
    limit: int,
    cursor: str | None = None,
    queues: Sequence[str] | None = None,
) -> DeadPage:
    """Return up to `limit` dead jobs of `queues` (default: `keys`'s), newest first.

    Each queue's DLQ is read after the cursor and the pages merged: (time, id) orders every
    queue's entries alike, so one cursor serves them all.
    """
    after = _parse_cursor(cursor) if cursor is not None else None
    entries: list[tuple[float, str, str]] = []
    for name in queues if queues is not None else [keys.queue]:
        entries += _dead_after(client, keys.for_queue(name), limit + 1, after)
    entries.sort(key=lambda entry: (entry[0], entry[1]), reverse=True)
    page, more = entries[:limit], len(entries) > limit
    pipe = client.pipeline(transaction=False)
    for _, job_id, queue in page:
        pipe.hgetall(keys.for_queue(queue).job(job_id))
    found = zip(page, pipe.execute(), strict=True)
    jobs = [Job.from_hash(raw, job_id, queue) for (_, job_id, queue), raw in found if raw]
    next_cursor = None
    if more and page:
        score, job_id, _ = page[-1]
        next_cursor = f"{int(score)}-{job_id}"
    return DeadPage(jobs=jobs, next_cursor=next_cursor)
