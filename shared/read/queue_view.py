"""Which queues a page shows, so that its cost grows with the queues shown, not those listed.

Anyone with a token can list a queue (an enqueue under a new name), so the overview, /stats,
GET /queues and /metrics each read a bounded set of queues per request:

- while the listed queues fit in one page (``limit``), all of them, live and exact (the
  totals are their sum), as before;
- past that, a page of names (SSCAN, its cursor in the reply) or a chosen set (the overview:
  the queues live hosts serve, then the busiest), each read live, and the totals of all
  queues from the last sweep (shared.read.summary), with its age.

Per request: one round trip for the count of listed queues, one SSCAN (or more, bounded)
per page, one pipelined read of the queues shown, one GET of the summary.

``names_within`` and ``served`` choose the same way but return names alone, for reads that
are not counts: job listings without a queue (shared.read.listing), the throughput of all queues
(shared.read.throughput). ``scan_names`` also pages the list of limited queues (GET /limits).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from shared.engine.queries import QueueCounts, WorkerCounts
from shared.engine.replies import text
from shared.engine.scripts import Scripts
from shared.model.queues import DEFAULT_QUEUE
from shared.model.u64 import is_u64
from shared.read import summary

# SSCAN calls one page may take while a name filter matches little (each looks at ~COUNT
# names): a search answers what it found and a cursor to go on from, never a sweep.
SCAN_CALLS = 10


@dataclass(frozen=True)
class QueueView:
    """The queues one page shows, read live, and the totals of all listed queues."""

    shown: QueueCounts  # by_queue: each queue shown; the rest: their sum
    workers: WorkerCounts
    listed: int  # queues in the list of queues
    totals: QueueCounts | None  # every listed queue; None: no sweep has finished yet
    totals_age_ms: int | None  # how old the totals are; None: read live now
    complete: bool  # every listed queue is shown: the totals are live and exact
    next_cursor: str | None = None  # the next page's cursor; None: this page is the last


def listed_count(scripts: Scripts) -> int:
    """Return how many queues are listed (the default queue always is): one round trip."""
    pipe = scripts.redis.pipeline(transaction=False)
    pipe.scard(scripts.keys.queues)
    pipe.sismember(scripts.keys.queues, DEFAULT_QUEUE)
    card, has_default = pipe.execute()
    return int(card) + (0 if has_default else 1)


def scan_names(
    scripts: Scripts,
    cursor: str | None,
    limit: int,
    match: str | None = None,
    *,
    key: str | None = None,
) -> tuple[list[str], str | None]:
    """Return about `limit` listed names from `cursor` on, and the next cursor (None: done).

    SSCAN: no order across pages (each page is sorted), and a name may come twice while the
    set grows, as SSCAN guarantees. `match`: names containing it. The default queue comes
    first on the first page (it is listed even before its first job). `key`: another set of
    queue names to page instead (such as Keys.limited), without the default queue.
    """
    found: dict[str, None] = {}
    first = cursor in (None, "0") and (match is None or match in DEFAULT_QUEUE)
    if first and key is None:
        found[DEFAULT_QUEUE] = None
    position = int(cursor or 0)
    pattern = None if match is None else f"*{_glob_escape(match)}*"
    for _ in range(SCAN_CALLS):
        position, names = scripts.redis.sscan(
            key or scripts.keys.queues, position, match=pattern, count=limit
        )
        found.update(dict.fromkeys(text(name) or "" for name in names))
        if position == 0 or len(found) >= limit:
            break
    return sorted(found), None if position == 0 else str(position)


def _glob_escape(value: str) -> str:
    # Queue names hold none of * ? [ ] \\ (shared.model.queues' rule), but a search string may.
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in value)


def is_cursor(value: str) -> bool:
    """Tell whether `value` could be a page cursor (an SSCAN position: Redis refuses one
    past 2^64 - 1 with an error)."""
    return is_u64(value)


def page(
    scripts: Scripts,
    *,
    limit: int,
    cursor: str | None = None,
    match: str | None = None,
    run: Callable[[Callable[[], object]], None] | None = None,
) -> QueueView:
    """Return one page of queues (by SSCAN) read live, with the totals of every queue."""
    listed = listed_count(scripts)
    if cursor is None and listed <= limit:
        return _all(scripts, listed, match)
    names, next_cursor = scan_names(scripts, cursor, limit, match)
    return _partial(scripts, listed, names, summary.current(scripts, run=run), next_cursor)


def chosen(
    scripts: Scripts,
    *,
    limit: int,
    first: Callable[[], Iterable[str]] = tuple,
    run: Callable[[Callable[[], object]], None] | None = None,
) -> QueueView:
    """Return every queue while they fit in `limit`; else the queues `first()` names, then
    the busiest of the last sweep, up to `limit`, read live, with the totals of every queue."""
    listed = listed_count(scripts)
    if listed <= limit:
        return _all(scripts, listed)
    totals = summary.current(scripts, run=run)
    names = dict.fromkeys(first())
    names.update(dict.fromkeys(name for name, _ in (totals.busiest if totals else ())))
    return _partial(scripts, listed, list(names)[:limit], totals)


def served(scripts: Scripts) -> list[str]:
    """Return the default queue and the queues hosts serve (Keys.served, by name): one ZRANGE.

    As many names as the hosts' WORKER_QUEUES (configuration, not names anyone creates), and
    every queue where a job is claimed, completes or fails (only a worker does those).
    """
    names = sorted(text(name) or "" for name in scripts.redis.zrange(scripts.keys.served, 0, -1))
    return list(dict.fromkeys([DEFAULT_QUEUE, *names]))


def names_within(
    scripts: Scripts,
    *,
    limit: int,
    first: Callable[[], Iterable[str]] = tuple,
    busiest: bool = True,
    run: Callable[[Callable[[], object]], None] | None = None,
) -> tuple[list[str], bool]:
    """Return every listed queue's name while they fit in `limit`, and True (all of them);
    past that, the queues `first()` names, then (`busiest`) the busiest of the last sweep,
    and False. For reads that need the names only (listings, the throughput)."""
    if listed_count(scripts) <= limit:
        return scripts.queue_names(), True
    names = dict.fromkeys(first())
    if busiest:
        totals = summary.current(scripts, run=run)
        names.update(dict.fromkeys(name for name, _ in (totals.busiest if totals else ())))
    return list(names), False


def _all(scripts: Scripts, listed: int, match: str | None = None) -> QueueView:
    """Read every queue (they fit in a page): exact totals; shown: those whose name matches."""
    counts, workers = scripts.stats(scripts.queue_names())
    shown = counts
    if match is not None:
        shown = QueueCounts.combined(
            {name: c for name, c in counts.by_queue.items() if match in name}
        )
    return QueueView(shown, workers, max(listed, len(counts.by_queue)), counts, None, True)


def _partial(
    scripts: Scripts,
    listed: int,
    names: list[str],
    totals: summary.Summary | None,
    next_cursor: str | None = None,
) -> QueueView:
    counts, workers = scripts.stats(names)
    return QueueView(
        counts,
        workers,
        listed,
        totals.counts() if totals else None,
        totals.age_ms() if totals else None,
        False,
        next_cursor,
    )
