"""Job listings of every state at once: one order, one cursor, a page's cost bounded.

The order is the lifecycle's, then each state's own (shared.read.listing): processing (what runs
now), pending (what runs next, in claim order), scheduled and retrying (what runs later, next
due first), then the finished, newest first: completed, dead, canceled. It is Sidekiq's
dashboard read top to bottom (Busy, Enqueued, Scheduled, Retries, Dead) and BullMQ's
``getJobs`` default (active, waiting, delayed, completed, failed): what is happening first,
history last.

A page reads the states one after another, from the cursor's state on, each with the
one-state listing, and stops as soon as the page is full: a state is read only when the page
still has room, so a page costs what the one-state listings of the states it reaches cost,
never a read of every state of every queue. The queues are chosen once per page
(shared.read.listing.base_queues), so their number is bounded as for one state. A page that fills
exactly at the end of a state peeks at the states after it (one entry per queue, index reads
only, one round trip a state, stopping at the first that has one), so the last page returns no
cursor rather than one that leads to an empty page.

A cursor is a place in that order: ``<state>`` (the start of a state) or
``<state>:<position>`` (after a position within it, the one-state cursor). A one-state
listing takes these too, as the same order restricted to its state: a place in an earlier
state starts it from the beginning, one in a later state leaves nothing to list. A bare
one-state cursor, without a state, is a place within the state listed (processing, the
first, for a listing of every state). Every text the documented pattern allows is thus a
cursor both listings accept.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from shared.engine.scripts import Scripts
from shared.model.jobs import Job, JobState
from shared.read.listing import (
    CURSOR_PATTERN,
    DEFAULT_LIMIT,
    Across,
    Position,
    base_queues,
    for_state,
    list_jobs,
    parse_cursor,
    read_queues,
)

LIFECYCLE: tuple[JobState, ...] = (
    JobState.PROCESSING,
    JobState.PENDING,
    JobState.SCHEDULED,
    JobState.RETRYING,
    JobState.COMPLETED,
    JobState.DEAD,
    JobState.CANCELED,
)
_NAMES = "|".join(str(state) for state in LIFECYCLE)
# Every cursor either listing takes: a place in the order of every state, or a bare position.
PLACE_PATTERN = re.compile(rf"(?:{_NAMES})(?::{CURSOR_PATTERN.pattern})?|{CURSOR_PATTERN.pattern}")


@dataclass(frozen=True)
class Place:
    """Where a listing resumes: within `state` (None: the state listed), after `position`
    (None: from the state's start)."""

    state: JobState | None
    position: Position | None

    def cursor(self) -> str:
        """Return the cursor text of a page that ends here."""
        state = "" if self.state is None else str(self.state)
        if self.position is None:
            return state
        return f"{state}:{self.position.cursor()}" if state else self.position.cursor()


def parse_place(text: str) -> Place:
    """Return the place a cursor names; raise BadCursor for text no listing made."""
    head, sep, rest = text.partition(":")
    if head in {str(state) for state in LIFECYCLE}:
        return Place(JobState(head), parse_cursor(rest) if sep else None)
    return Place(None, parse_cursor(text))


@dataclass(frozen=True)
class Within:
    """Where a one-state listing resumes from a place: nothing left (`done`), or `cursor`."""

    done: bool
    cursor: str | None


def within(state: JobState, cursor: str | None) -> Within:
    """Return where a listing of `state` alone resumes from `cursor` (BadCursor if not one)."""
    place = parse_place(cursor) if cursor is not None else Place(state, None)
    if place.state is None or place.state is state:
        return Within(False, None if place.position is None else place.position.cursor())
    return Within(LIFECYCLE.index(place.state) > LIFECYCLE.index(state), None)


@dataclass(frozen=True)
class StatesPage:
    """A page of jobs of every state, the next page's cursor (None: the end), and whether it
    read every queue."""

    jobs: list[Job]
    next_cursor: str | None
    every_queue: bool


def list_every_state(
    scripts: Scripts,
    queue: str | None = None,
    *,
    limit: int = DEFAULT_LIMIT,
    cursor: str | None = None,
    job_type: str | None = None,
) -> StatesPage:
    """Return one page of jobs of every state in lifecycle order (`queue` alone if given, of
    `job_type` only if given). Raises BadCursor for a cursor no listing made."""
    place = parse_place(cursor) if cursor is not None else Place(None, None)
    start = place.state or LIFECYCLE[0]
    after = None if place.position is None else place.position.cursor()
    base = base_queues(scripts, queue)
    jobs: list[Job] = []
    states = LIFECYCLE[LIFECYCLE.index(start) :]
    for at, state in enumerate(states):
        across = for_state(scripts, state, base)
        page = list_jobs(
            scripts,
            state,
            across.queues,
            limit=limit - len(jobs),
            cursor=after,
            job_type=job_type,
        )
        jobs += page.jobs
        if page.next_cursor is not None:
            # More of this state (or a short page of a type filter): resume within it.
            following = Place(state, parse_cursor(page.next_cursor)).cursor()
            return StatesPage(jobs, following, base.every)
        after = None
        if len(jobs) >= limit:
            following = _next_listed_state(scripts, states[at + 1 :], base, job_type)
            return StatesPage(jobs, following, base.every)
    return StatesPage(jobs, None, base.every)


def _next_listed_state(
    scripts: Scripts, rest: Sequence[JobState], base: Across, job_type: str | None
) -> str | None:
    """Return the cursor of the first of `rest` with an entry to list (None: nothing left).

    A type filter's read may stop before finding one (`more`): then the state is named, and
    its page may be empty, as a filtered page may be."""
    for state in rest:
        reads = read_queues(
            scripts, state, for_state(scripts, state, base).queues, 1, None, job_type
        )
        if any(read.entries or read.more for read in reads):
            return Place(state, None).cursor()
    return None
