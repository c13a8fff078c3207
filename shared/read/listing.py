"""Job listings: one state's jobs, page by page, over one queue or several.

Each state has one order, a total order on its index entries (score, member):

- pending: claim order (highest priority, then first in), ascending (-priority, <seq>:<id>);
- scheduled, retrying: next to run first, ascending (due time, id);
- completed, dead, canceled: newest first, descending (finished, died or canceled at, id);
- processing: newest first by (started_at, id), read from the running jobs' hashes: the index
  scores by lease deadline, which every renewal moves.

A cursor is the (score, member) of the last entry a page considered; the next page starts
strictly after it. A job that stays in its state keeps its entry, so paging never shows it
twice nor skips it, while other jobs come and go. Locating the cursor costs O(log n) even
when its own job has left (list_page.lua), so a page costs O(log n + page) per queue.

Pending jobs a limit holds (docs/QUEUES.md, "Concurrency and rate limits") wait in the queue's
``held_order``, scored and named as ``pending`` scores and names them: each queue's held jobs
are read as one more source and merged in the same order, so a held job is listed where it
waits.

Several queues: the same cursor is a position in each queue's order (ids are unique across
queues, so the order stays total). Each queue gives up to a page after it, all in one
pipelined round trip, and the pages are merged. With a type filter a queue stops after a
bounded number of entries (like SCAN), and the merge keeps only what lies before the earliest
place a queue stopped, so nothing past it is skipped. Then one more round trip reads the page's
jobs; a job that changed state in between is left out (it is no longer in this state).

Without a queue (``queues_for``): every listed queue while they are at most
``EVERY_QUEUE_CAP``; past that, since anyone can list a queue and a page must not cost one
read per queue, the queues hosts serve (where jobs are claimed, complete, fail and die),
the busiest of the last sweep of the totals (shared.read.summary: most pending + processing),
and for scheduled jobs the queues whose next job is due soonest (the due index): a bounded
set, chosen again for each page. A queue that joins the set between two pages is listed
from the cursor's position on; a job is still never shown twice. Naming a queue lists any.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shared.engine.replies import text
from shared.engine.scripts import Scripts
from shared.model.jobs import JOB_ID_PATTERN, Job, JobState
from shared.read.queue_view import names_within, served

# list_page.lua's order of each state's index.
ASCENDING, DESCENDING, BY_START = "asc", "desc", "started"
ORDER: dict[JobState, str] = {
    JobState.PENDING: ASCENDING,
    JobState.SCHEDULED: ASCENDING,
    JobState.RETRYING: ASCENDING,
    JobState.PROCESSING: BY_START,
    JobState.COMPLETED: DESCENDING,
    JobState.DEAD: DESCENDING,
    JobState.CANCELED: DESCENDING,
}
DEFAULT_LIMIT = 50
LIMIT_RANGE = (1, 1000)
# A type filter examines at most this many entries per queue and page: ten per job asked for,
# at most 1,000 (then at least the page size).
TYPE_SCAN_FACTOR = 10
TYPE_SCAN_MAX = 1000
# A listing without a queue reads every listed queue while there are at most this many.
EVERY_QUEUE_CAP = 100
# Past that, scheduled jobs are also read from this many queues whose next job is due soonest.
SOONEST_DUE = 50
# "<score>:<member>": every score is an integer (ms, or -priority within ±2^31); a member is a
# job id, or "<16-digit seq>:<id>" in pending. [0-9], not \d: \d also matches other scripts'
# digits, which int() would take.
CURSOR_PATTERN = re.compile(rf"(-?[0-9]{{1,16}}):((?:[0-9]{{16}}:)?{JOB_ID_PATTERN.pattern})")


class BadCursor(ValueError):
    """A listing cursor that this module did not produce."""


@dataclass(frozen=True, order=True)
class Position:
    """An index entry's place in its order: (score, member), compared as Redis does."""

    score: int
    member: str

    @property
    def job_id(self) -> str:
        """Return the job id of the entry (a pending member is ``<seq>:<id>``)."""
        return self.member.rpartition(":")[2]

    def cursor(self) -> str:
        """Return the cursor text of a page that ends here."""
        return f"{self.score}:{self.member}"


def parse_cursor(text: str) -> Position:
    """Return the position a cursor names; raise BadCursor for text this module never made."""
    match = CURSOR_PATTERN.fullmatch(text)
    if not match:
        raise BadCursor("cursor is not one this server returned")
    return Position(int(match.group(1)), match.group(2))


@dataclass(frozen=True)
class Across:
    """The queues a listing reads: the one named, or a bounded set (every: all listed)."""

    queues: list[str]
    every: bool


def queues_for(scripts: Scripts, state: JobState, queue: str | None = None) -> Across:
    """Return the queues a listing of `state` reads: `queue` alone if given; else every listed
    queue while they fit EVERY_QUEUE_CAP, else the served, busiest (and soonest due) ones.

    At most three round trips, none of which grows with the number of queues: the count of
    listed queues, the served queues (one ZRANGE), the summary (one GET; a due sweep runs in
    a thread, shared.read.summary); scheduled adds one ZRANGE of the due index.
    """
    return for_state(scripts, state, base_queues(scripts, queue))


def base_queues(scripts: Scripts, queue: str | None = None) -> Across:
    """Return the queues a listing of any state reads: `queue` alone if given; else every
    listed queue while they fit EVERY_QUEUE_CAP, else the served and the busiest ones."""
    if queue is not None:
        return Across([queue], True)
    names, every = names_within(scripts, limit=EVERY_QUEUE_CAP, first=lambda: served(scripts))
    return Across(names, every)


def for_state(scripts: Scripts, state: JobState, base: Across) -> Across:
    """Return `base` as a listing of `state` reads it: past the cap, scheduled adds the
    queues whose next job is due soonest (one ZRANGE), so its first page is the next due."""
    if base.every or state is not JobState.SCHEDULED:
        return base
    due = scripts.redis.zrange(scripts.keys.due, 0, SOONEST_DUE - 1)
    names = [*base.queues, *(text(name) or "" for name in due)]
    return Across(list(dict.fromkeys(names)), False)


@dataclass(frozen=True)
class JobPage:
    """One page of jobs in their state's order, and the cursor of the next (None at the end)."""

    jobs: list[Job]
    next_cursor: str | None


@dataclass(frozen=True)
class QueueRead:
    """What one queue gave: its entries after the cursor, where it stopped, whether more lie past."""

    queue: str
    entries: list[Position]
    last: Position | None
    more: bool


def scan_budget(limit: int, job_type: str | None) -> int:
    """Return how many entries a queue examines at most for a page of `limit` jobs."""
    if job_type is None:
        return limit
    return max(limit, min(limit * TYPE_SCAN_FACTOR, TYPE_SCAN_MAX))


def list_jobs(
    scripts: Scripts,
    state: JobState,
    queues: Sequence[str],
    *,
    limit: int = DEFAULT_LIMIT,
    cursor: str | None = None,
    job_type: str | None = None,
) -> JobPage:
    """Return one page of `state`'s jobs in `queues` (of `job_type` only, if given).

    Raises BadCursor for a cursor this module did not make. Two round trips: the index reads
    (one script call per queue, pipelined), then the jobs' hashes (one HGETALL each).
    """
    after = parse_cursor(cursor) if cursor is not None else None
    reads = read_queues(scripts, state, queues, limit, after, job_type)
    reverse = ORDER[state] != ASCENDING
    page, following = merge(reads, limit, reverse)
    return JobPage(
        jobs=read_jobs(scripts, state, page),
        next_cursor=None if following is None else following.cursor(),
    )


def read_queues(
    scripts: Scripts,
    state: JobState,
    queues: Sequence[str],
    limit: int,
    after: Position | None,
    job_type: str | None,
) -> list[QueueRead]:
    """Read each queue's entries after `after` in one pipelined round trip."""
    order = ORDER[state]
    budget = scan_budget(limit, job_type)

    # (queue, held) per read: pending reads each queue's held jobs too.
    held_too = (False, True) if state is JobState.PENDING else (False,)
    sources = [(queue, held) for queue in queues for held in held_too]

    def pipeline() -> Any:
        pipe = scripts.redis.pipeline(transaction=False)
        start = None if after is None else (after.score, after.member)
        for queue, held in sources:
            scripts.list_page(
                pipe,
                queue=queue,
                state=state,
                order=order,
                after=start,
                limit=limit,
                budget=budget,
                job_type=job_type,
                held=held,
            )
        return pipe

    replies = scripts.execute_loaded(pipeline)  # a page read changes nothing: repeatable
    return [
        _running(queue, reply, limit, after) if order == BY_START else _indexed(queue, reply)
        for (queue, _), reply in zip(sources, replies, strict=True)
    ]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _score(value: bytes | str) -> int:
    # Redis answers a score as a double's text; ours are integers (exact below 2^53).
    return int(float(value))


def _indexed(queue: str, reply: list[Any]) -> QueueRead:
    more, last_member, last_score, *flat = reply
    entries = [Position(_score(flat[i + 1]), _text(flat[i])) for i in range(0, len(flat), 2)]
    last = Position(_score(last_score), _text(last_member)) if _text(last_member) else None
    return QueueRead(queue, entries, last, more == 1)


def _running(queue: str, reply: list[Any], limit: int, after: Position | None) -> QueueRead:
    """Page a queue's running jobs, newest start first; the script gave all of them."""
    flat = reply[3:]
    started = [Position(_score(flat[i]), _text(flat[i + 1])) for i in range(0, len(flat), 2)]
    started.sort(reverse=True)
    if after is not None:
        started = [p for p in started if p < after]
    entries = started[:limit]
    return QueueRead(queue, entries, entries[-1] if entries else None, len(started) > limit)


def merge(
    reads: Sequence[QueueRead], limit: int, reverse: bool
) -> tuple[list[tuple[Position, str]], Position | None]:
    """Return the page of (position, queue) in order, and where the next page starts after.

    A queue that stopped with entries left (`more`) considered nothing past its `last`: so only
    entries up to the earliest such stop (in this order) are sure to be all there are, and a
    page never goes beyond it. Without a filter the queue that stopped there gave a full page
    before it; with one, the page may be short (even empty), and the cursor still moves on.
    """
    stops = [read.last for read in reads if read.more and read.last is not None]
    edge = (max(stops) if reverse else min(stops)) if stops else None
    candidates = [
        (position, read.queue)
        for read in reads
        for position in read.entries
        if edge is None or (position >= edge if reverse else position <= edge)
    ]
    candidates.sort(reverse=reverse)
    page = candidates[:limit]
    following = page[-1][0] if len(candidates) > limit else edge
    return page, following


def read_jobs(scripts: Scripts, state: JobState, page: list[tuple[Position, str]]) -> list[Job]:
    """Return the page's jobs, leaving out any that changed state (or went) since the read."""
    pipe = scripts.redis.pipeline(transaction=False)
    for position, queue in page:
        pipe.hgetall(scripts.keys.for_queue(queue).job(position.job_id))
    wanted = str(state).encode()
    return [
        Job.from_hash(raw, position.job_id, queue)
        for (position, queue), raw in zip(page, pipe.execute(), strict=True)
        if raw.get(b"status") == wanted
    ]
