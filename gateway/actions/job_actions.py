"""Actions on jobs: replay or purge a dead one, cancel one, replay or purge many dead ones."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.actions.action_errors import InvalidInput, NotFound, WrongJobState
from gateway.context import Gateway
from shared.engine.engine_types import CancelResult, JobNotFound, WrongState
from shared.engine.lifecycle import Outcome, record
from shared.model.jobs import Job, JobState
from shared.read import bulk, listing

CANCELABLE = "pending, scheduled, retrying or processing"
JOB_NOT_FOUND = "job not found"


def _not_dead(exc: WrongState) -> WrongJobState:
    return WrongJobState(
        f"job is {exc.status}, not dead: only dead jobs are in the DLQ", str(exc.status)
    )


def _queue_of(gw: Gateway, job_id: str, queue: str | None) -> str:
    """Return the queue given (the caller read the job already), else the one holding it."""
    found = queue if queue is not None else gw.directory.locator.locate(job_id)
    if found is None:
        raise NotFound(JOB_NOT_FOUND)
    return found


def replay(gw: Gateway, job_id: str, *, queue: str | None = None) -> Job:
    """Return a dead job to pending with attempts 0; return it as replayed."""
    try:
        job = gw.scripts.replay(job_id, queue=_queue_of(gw, job_id, queue))
    except JobNotFound:
        raise NotFound(JOB_NOT_FOUND) from None
    except WrongState as exc:
        raise _not_dead(exc) from None
    record(Outcome.REPLAYED, job.id, job.type, queue=job.queue, trace=job.extra.get("traceparent"))
    return job


@dataclass(frozen=True)
class Purged:
    """A dead job deleted for good: its id, queue and type."""

    job_id: str
    queue: str
    job_type: str


def purge(gw: Gateway, job_id: str, *, queue: str | None = None) -> Purged:
    """Delete a dead job for good."""
    try:
        queue = _queue_of(gw, job_id, queue)
        job_type = gw.scripts.purge(job_id, queue=queue)  # it answers with the type it deleted
    except JobNotFound:
        raise NotFound(JOB_NOT_FOUND) from None
    except WrongState as exc:
        raise _not_dead(exc) from None
    record(Outcome.PURGED, job_id, job_type, queue=queue)
    return Purged(job_id, queue, job_type)


def cancel(gw: Gateway, job_id: str, *, by: str, queue: str | None = None) -> CancelResult:
    """Cancel a job that has not started, or ask for a running one to be stopped (its
    supervisor stops it; it then ends canceled, unless it completes first). `by`, who asked,
    goes into the job's history. A repeat changes nothing and is answered alike."""
    try:
        outcome = gw.scripts.cancel(job_id, queue=_queue_of(gw, job_id, queue), by=by)
    except JobNotFound:
        raise NotFound(JOB_NOT_FOUND) from None
    except WrongState as exc:
        raise WrongJobState(
            f"job is {exc.status}: only {CANCELABLE} jobs can be canceled", str(exc.status)
        ) from None
    _record_cancel(outcome)
    return outcome


def _record_cancel(outcome: CancelResult) -> None:
    """Record a job canceled, or a running job asked to stop; a repeat is not recorded again."""
    job = outcome.job
    if not outcome.changed:
        return
    if job.status is JobState.PROCESSING:
        by = job.cancel_requested_by or None
        record(Outcome.CANCEL_REQUESTED, job.id, job.type, queue=job.queue, by=by)
    else:
        record(Outcome.CANCELED, job.id, job.type, queue=job.queue)


@dataclass(frozen=True)
class DeadJobs:
    """Which dead jobs a bulk action takes: explicit ids, or a filter (queue, type) walked a
    page at a time from a cursor."""

    ids: list[str] | None = None
    queue: str | None = None
    job_type: str | None = None


def bulk_dlq(
    gw: Gateway,
    action: bulk.Action,
    which: DeadJobs,
    *,
    limit: int,
    cursor: str | None = None,
    up_to: int | None = None,
) -> bulk.BulkResult:
    """Replay or purge dead jobs: the ids (each found through its tag, in any queue), or a page
    of `limit` matching the filter (in the queue named, else the bounded set the listing
    reads: shared.read.listing.queues_for). With `up_to`, a filter's pages are walked until that
    many jobs were handled or the walk is over; without, one page."""
    queues: list[str] | None = None  # ids: found through their tags, no list of queues read
    if which.ids is None:
        queues = listing.queues_for(gw.scripts, JobState.DEAD, which.queue).queues
    done: list[str] = []
    skipped: list[tuple[str, str]] = []
    while True:
        try:
            result = bulk.bulk_dead(
                gw.scripts,
                action,
                queues=queues,
                ids=which.ids,
                job_type=which.job_type,
                limit=limit,
                cursor=cursor,
                locator=gw.directory.locator,
            )
        except listing.BadCursor as exc:
            raise InvalidInput(
                f"bad cursor: {exc}; use a next_cursor this server returned"
            ) from None
        done += result.done
        skipped += result.skipped
        cursor = result.next_cursor
        if up_to is None or cursor is None or len(done) + len(skipped) >= up_to:
            return bulk.BulkResult(done, skipped, cursor)
