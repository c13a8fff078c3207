"""Read-only views of the engine's state: one job, DLQ pages, and the shape of its counts."""

from __future__ import annotations

import re
from dataclasses import dataclass

import redis

from shared.jobs import Job, JobState
from shared.keys import Keys

CURSOR_PATTERN = re.compile(r"([0-9]{1,16})-([0-9a-f-]{36})")


class BadCursor(ValueError):
    """A DLQ cursor that this module did not produce."""


@dataclass(frozen=True)
class QueueCounts:
    """Jobs per state, read from the state indexes in one round trip (each O(1))."""

    by_state: dict[JobState, int]
    oldest_pending_age_ms: int | None

    @property
    def total(self) -> int:
        """Return the number of jobs Redis holds in any state."""
        return sum(self.by_state.values())


@dataclass(frozen=True)
class WorkerCounts:
    """workerd hosts in the registry, and their live and busy worker processes."""

    hosts: int
    live: int
    busy: int


@dataclass(frozen=True)
class DeadPage:
    """One page of the DLQ, newest first, and the cursor of the next page (None at the end)."""

    jobs: list[Job]
    next_cursor: str | None


def get_job(client: redis.Redis, keys: Keys, job_id: str) -> Job | None:
    """Return one job, or None if it does not exist."""
    raw = client.hgetall(keys.job(job_id))
    return Job.from_hash(raw, job_id) if raw else None


def _parse_cursor(cursor: str) -> tuple[int, str]:
    match = CURSOR_PATTERN.fullmatch(cursor)
    if not match:
        raise BadCursor("cursor is not one this server returned")
    return int(match.group(1)), match.group(2)


def dead_page(client: redis.Redis, keys: Keys, limit: int, cursor: str | None = None) -> DeadPage:
    """Return up to `limit` dead jobs, newest first, starting after `cursor`."""
    # Ties in time of death are ordered by id (descending, as ZREVRANGEBYSCORE does), so a
    # cursor is (time, id): first the rest of that millisecond, then strictly older ones.
    entries: list[tuple[bytes, float]] = []
    if cursor is None:
        entries = client.zrevrangebyscore(keys.dead, "+inf", "-inf", 0, limit + 1, withscores=True)
    else:
        score, last_id = _parse_cursor(cursor)
        ties = client.zrevrangebyscore(keys.dead, score, score, withscores=True)
        entries = [(m, s) for m, s in ties if m.decode() < last_id][: limit + 1]
        if len(entries) <= limit:
            entries += client.zrevrangebyscore(
                keys.dead, f"({score}", "-inf", 0, limit + 1 - len(entries), withscores=True
            )
    page, more = entries[:limit], len(entries) > limit
    pipe = client.pipeline(transaction=False)
    for member, _ in page:
        pipe.hgetall(keys.job(member.decode()))
    hashes = zip((member.decode() for member, _ in page), pipe.execute(), strict=True)
    jobs = [Job.from_hash(raw, job_id) for job_id, raw in hashes if raw]
    next_cursor = None
    if more and page:
        member, score = page[-1]
        next_cursor = f"{int(score)}-{member.decode()}"
    return DeadPage(jobs=jobs, next_cursor=next_cursor)
