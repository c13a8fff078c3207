"""Seeding jobs into a given state at a known place in its listing order, and paging through
a listing: shared by tests/engine/test_listing.py and tests/engine_props/test_listing_moves.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from shared.engine.engine_types import Code
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, format_ms
from shared.read import listing
from shared.read.listing import list_jobs
from tests.engine.conftest import POLICY, T0, request

DEFAULT = "default"


@dataclass(frozen=True)
class Seed:
    """A job put in a state: where it sits in that state's order."""

    id: str
    queue: str
    at: int  # the index score the seeding gave it (started_at for processing)
    priority: int = 0
    order: int = 0  # enqueue order (pending's tie-break within a priority)


def seed(
    scripts: Scripts,
    state: JobState,
    jid: str,
    at: int,
    *,
    queue: str = DEFAULT,
    job_type: str = "t",
    priority: int = 0,
) -> None:
    """Put job `jid` in `state`; `at` sets its index score (its start time in processing)."""
    kind = request(job_type, priority=priority, queue=queue)
    if state is JobState.PENDING:
        assert scripts.enqueue(kind, jid, now_ms=at).created
        return
    if state is JobState.SCHEDULED:
        later = request(job_type, queue=queue, scheduled_at=format_ms(at))
        assert scripts.enqueue(later, jid, now_ms=T0).status == "scheduled"
        return
    if state is JobState.CANCELED:
        scripts.enqueue(kind, jid, now_ms=T0)
        assert scripts.cancel(jid, queue=queue, now_ms=at).changed
        return
    # Claimed right after its enqueue: the seeded queue holds no other pending job.
    once = request(job_type, queue=queue, priority=priority, max_retries=1)
    scripts.enqueue(kind if state is not JobState.DEAD else once, jid, now_ms=at)
    claimed = scripts.claim(f"w-{jid}", queue=queue, now_ms=at)
    assert claimed is not None and claimed.id == jid
    if state is JobState.COMPLETED:
        assert scripts.complete(jid, claimed.token, queue=queue, now_ms=at).code is Code.DONE
    elif state is JobState.DEAD:
        assert scripts.fail(jid, claimed.token, "E: x", queue=queue, now_ms=at).code is Code.DEAD
    elif state is JobState.RETRYING:
        retry = scripts.fail(jid, claimed.token, "E: x", queue=queue, now_ms=at)
        assert retry.next_retry_at == at + POLICY.retry_base_ms  # no jitter in POLICY


def score_of(state: JobState, s: Seed) -> int:
    return s.at + POLICY.retry_base_ms if state is JobState.RETRYING else s.at


def expected(state: JobState, seeds: list[Seed]) -> list[str]:
    """Return the ids in the documented order of `state`, from the seeds alone."""
    if state is JobState.PENDING:
        return [s.id for s in sorted(seeds, key=lambda s: (-s.priority, s.order))]
    ordered = sorted(seeds, key=lambda s: (score_of(state, s), s.id))
    if listing.ORDER[state] == listing.ASCENDING:
        return [s.id for s in ordered]
    return [s.id for s in reversed(ordered)]


def pages(
    scripts: Scripts,
    state: JobState,
    queues: list[str],
    limit: int,
    job_type: str | None = None,
    between: Callable[[str], None] | None = None,
    max_pages: int = 1_000,
) -> list[list[str]]:
    """Page through a listing to its end; return each page's ids. `between(cursor)` runs
    before each later page."""
    found: list[list[str]] = []
    cursor = None
    for _ in range(max_pages):
        page = list_jobs(scripts, state, queues, limit=limit, cursor=cursor, job_type=job_type)
        found.append([job.id for job in page.jobs])
        assert all(job.status is state for job in page.jobs)
        if page.next_cursor is None:
            return found
        cursor = page.next_cursor
        if between is not None:
            between(cursor)
    raise AssertionError("the listing did not end")


def flat(found: list[list[str]]) -> list[str]:
    return [jid for page in found for jid in page]
