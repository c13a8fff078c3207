"""The dead-letter page: dead jobs by queue and type; replay or purge the selected ones or all
that match the filter, each after a confirmation page.

The bulk work goes through gateway.actions.job_actions.bulk_dlq (as POST /dlq/retry and /dlq/purge
do), a bounded batch per call, looped up to PER_REQUEST jobs: a larger DLQ answers "N done,
more remain" with a button that continues from the cursor, so no request runs for long.
"""

from __future__ import annotations

from flask import flash, redirect, request, url_for
from werkzeug.wrappers import Response as BaseResponse

from gateway.actions.action_errors import InvalidInput
from gateway.actions.job_actions import DeadJobs, bulk_dlq
from gateway.context import gateway
from gateway.ui.job_pages import Filters, confirm_page, confirmed, read_filters, read_page
from gateway.ui.ui_base import UiError, bp, counted, events_url, render
from shared.model.jobs import JOB_ID_PATTERN, TYPE_PATTERN, JobState
from shared.model.queues import is_queue_name
from shared.read.bulk import Action
from shared.read.listing import queues_for

BATCH = 100  # jobs per bulk_dead call
PER_REQUEST = 1000  # jobs one request handles at most before asking to continue
OPERATIONS: dict[str, tuple[Action, str]] = {
    "replay-selected": ("replay", "selected"),
    "purge-selected": ("purge", "selected"),
    "replay-all": ("replay", "all"),
    "purge-all": ("purge", "all"),
}
VERBS = {"replay": ("Replay", "replayed"), "purge": ("Purge", "purged")}


@bp.route("/dlq")
def dlq() -> tuple[str, int]:
    """List dead jobs, newest first, filtered by queue and type, with the bulk actions."""
    filters = read_filters(JobState.DEAD)
    filters = Filters(JobState.DEAD, filters.queue, filters.job_type, filters.cursor)
    page, every_queue = read_page(filters)
    next_url = None
    if page.next_cursor is not None:
        args = filters.args(cursor=page.next_cursor)
        args.pop("state")
        next_url = url_for("ui.dlq", **args)
    return render(
        "dlq.html",
        "dlq",
        filters=filters,
        jobs=page.jobs,
        next_url=next_url,
        every_queue=every_queue,
        live_events=events_url(queue=filters.queue, type=filters.job_type),
    )


def _selected_ids() -> list[str]:
    ids = [raw.lower() for raw in request.form.getlist("id")]
    if len(ids) > PER_REQUEST:
        raise UiError(400, f"At most {PER_REQUEST} jobs can be selected at once.")
    if not all(JOB_ID_PATTERN.fullmatch(job_id) for job_id in ids):
        raise UiError(400, "A selected id is not a job id.")
    return list(dict.fromkeys(ids))


def _form_filters() -> tuple[str | None, str | None]:
    queue = request.form.get("queue", "").strip() or None
    job_type = request.form.get("type", "").strip() or None
    if queue is not None and not is_queue_name(queue):
        raise UiError(400, "bad queue name")
    if job_type is not None and not TYPE_PATTERN.fullmatch(job_type):
        raise UiError(400, "bad job type")
    return queue, job_type


def _describe(queue: str | None, job_type: str | None, every_queue: bool) -> str:
    where = f"in queue {queue}" if queue else "in every queue"
    if not every_queue:
        where = "in the queues workers serve and the busiest (name a queue for any other)"
    return f"of type {job_type}, {where}" if job_type else where


@bp.route("/dlq/act", methods=["POST"])
def act() -> BaseResponse | tuple[str, int]:
    """Replay or purge the selected dead jobs, or all matching the filter (after confirming)."""
    op = request.form.get("op", "")
    if op not in OPERATIONS:
        raise UiError(400, "Unknown action.")
    action, scope = OPERATIONS[op]
    verb, done_word = VERBS[action]
    queue, job_type = _form_filters()
    back_args = {name: value for name, value in (("queue", queue), ("type", job_type)) if value}
    back = url_for("ui.dlq", **back_args)
    ids = _selected_ids() if scope == "selected" else None
    if ids is not None and not ids:
        flash("Select at least one job first.")
        return redirect(back, code=303)
    cursor = request.form.get("cursor") or None
    if not confirmed():
        return _confirm(verb, ids, queue, job_type, back)
    which = DeadJobs(ids, queue, job_type)
    try:
        # Selected ids in one call (at most PER_REQUEST); a filter in batches up to PER_REQUEST.
        limit = len(ids) if ids else BATCH
        result = bulk_dlq(gateway(), action, which, limit=limit, cursor=cursor, up_to=PER_REQUEST)
    except InvalidInput:
        raise UiError(400, "That continue button is not one this dashboard made.") from None
    done, skipped = len(result.done), len(result.skipped)
    if result.next_cursor is not None:
        message = f"{done} {done_word}, {skipped} skipped; more remain. Continue?"
        return confirm_page(
            f"{verb} dead jobs: continue", message, [], back, cursor=result.next_cursor
        )
    flash(f"{done} {done_word}, {skipped} skipped (no longer dead, or gone).")
    return redirect(back, code=303)


def _confirm(
    verb: str, ids: list[str] | None, queue: str | None, job_type: str | None, back: str
) -> tuple[str, int]:
    """Ask before acting, saying on which dead jobs (the queues a filter acts on are those the
    DLQ page lists: shared.read.listing.queues_for)."""
    if ids is not None:
        which = "this" if len(ids) == 1 else "these"
        message = f"{verb} {which} {counted(len(ids), 'dead job')}?"
    else:
        across = queues_for(gateway().scripts, JobState.DEAD, queue)
        message = f"{verb} every dead job {_describe(queue, job_type, across.every)}"
        if job_type:  # a count by type would read every dead job: the DLQ page lists them
            message += "? The list on the DLQ page shows which they are."
        else:
            message += f" ({_dead_count(across.queues)} dead there now)?"
    return confirm_page(f"{verb} dead jobs", message, ids or [], back)


def _dead_count(queues: list[str]) -> int:
    counts, _ = gateway().scripts.stats(queues)
    return counts.by_state[JobState.DEAD]
