"""Bulk DLQ actions: replay or purge many dead jobs, chosen by id or by the listing's filters.

Each job goes through the same script as a single replay or purge (replay.lua, purge.lua),
one pipelined round trip for the lot: so each is atomic on its own, answers alone, and writes
whatever that script writes (its history, its events). A job that is no longer dead when its
script runs (replayed or purged meanwhile, by another caller or an earlier call) is skipped
with the reason, not an error: a repeated call does no harm, and a bulk call racing a single
replay never replays a job twice.

A filter is walked with the listing's cursor (shared.read.listing, state dead: newest death
first). The cursor is a position, not a job, so it stays valid when the jobs before it have
left the DLQ; a call made again with the same cursor acts on the dead jobs after that
position that are still there. A job that dies after the walk began sorts before its cursor:
the walk does not reach it (start again without a cursor).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from shared.engine.engine_types import EngineError, JobNotFound, WrongState
from shared.engine.job_locator import JobLocator
from shared.engine.lifecycle import Outcome, record
from shared.engine.scripts import Scripts
from shared.model.jobs import Job, JobState
from shared.read.listing import list_jobs

Action = Literal["replay", "purge"]
ACTIONS: tuple[Action, ...] = ("replay", "purge")
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000  # jobs per call, by id or by filter: one pipeline of this many script calls


@dataclass(frozen=True)
class BulkResult:
    """What one call did: the ids acted on, those skipped (id, reason), where to go on."""

    done: list[str]
    skipped: list[tuple[str, str]]
    next_cursor: str | None


def bulk_dead(
    scripts: Scripts,
    action: Action,
    *,
    queues: Sequence[str] | None,
    ids: Sequence[str] | None = None,
    job_type: str | None = None,
    limit: int = DEFAULT_LIMIT,
    cursor: str | None = None,
    locator: JobLocator | None = None,
) -> BulkResult:
    """Replay or purge dead jobs in `queues`: the given `ids`, or a page of the filter.

    With `ids` (at most MAX_LIMIT) each is found through its tag (shared.engine.job_locator: two
    round trips for the lot, whatever the number of queues), in `queues` only unless None;
    `locator`: the process's, to reuse its memory (default: a new one). `job_type`, `limit`
    and `cursor` are for the filter only, which needs `queues`. Raises ValueError for a bound
    or an unknown action, shared.read.listing.BadCursor for a cursor the listing did not make.
    """
    if action not in ACTIONS:
        raise ValueError(f"action must be one of {', '.join(ACTIONS)}, not {action!r}")
    if ids is not None:
        if len(ids) > MAX_LIMIT:
            raise ValueError(f"at most {MAX_LIMIT} ids per call, got {len(ids)}")
        wanted = list(dict.fromkeys(ids))  # a repeated id is acted on once
        located = (locator or JobLocator(scripts)).locate_many(wanted, among=queues)
        targets = [(jid, located[jid]) for jid in wanted if jid in located]
        skipped = [(jid, "not found") for jid in wanted if jid not in located]
        next_cursor = None
    else:
        if queues is None:
            raise ValueError("a filter needs the queues it walks")
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit must be from 1 to {MAX_LIMIT}, got {limit}")
        page = list_jobs(
            scripts, JobState.DEAD, queues, limit=limit, cursor=cursor, job_type=job_type
        )
        targets = [(job.id, job.queue) for job in page.jobs]
        skipped, next_cursor = [], page.next_cursor
    done, refused = _act(scripts, action, targets)
    return BulkResult(done, skipped + refused, next_cursor)


def _act(
    scripts: Scripts, action: Action, targets: list[tuple[str, str]]
) -> tuple[list[str], list[tuple[str, str]]]:
    """Run the action's script on each (id, queue); record each outcome; return done, skipped."""
    if not targets:
        return [], []
    done: list[str] = []
    skipped: list[tuple[str, str]] = []
    if action == "replay":
        for (jid, queue), replayed in zip(targets, scripts.replay_each(targets), strict=True):
            if isinstance(replayed, Job):
                done.append(jid)
                trace = replayed.extra.get("traceparent")
                record(Outcome.REPLAYED, jid, replayed.type, queue=queue, trace=trace)
            else:
                skipped.append((jid, _reason(replayed)))
    else:
        for (jid, queue), purged in zip(targets, scripts.purge_each(targets), strict=True):
            if isinstance(purged, str):
                done.append(jid)
                record(Outcome.PURGED, jid, purged, queue=queue)
            else:
                skipped.append((jid, _reason(purged)))
    return done, skipped


def _reason(error: EngineError) -> str:
    """Return why a job was skipped, as the API answers it."""
    if isinstance(error, WrongState):
        return f"not dead: {error.status}"
    if isinstance(error, JobNotFound):
        return "not found"
    return str(error)
