"""The job listing (one state, filtered, paged by cursor) and one job's page with its actions."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flask import Response, flash, redirect, request, url_for
from werkzeug.wrappers import Response as BaseResponse

from gateway.actions import job_actions as actions
from gateway.actions.action_errors import NotFound, WrongJobState
from gateway.context import gateway
from gateway.ui.ui_base import UiError, asked_by, bp, events_url, render
from shared.engine import history
from shared.model.jobs import JOB_ID_PATTERN, TYPE_PATTERN, Job, JobState
from shared.model.queues import QUEUE_RULE, is_queue_name
from shared.read import listing

PAGE_SIZE = 50
# A payload or result past this many characters shows its start alone: a browser lays out a
# 1 MiB <pre> slowly, and every live refresh would send it again. The whole is a link away.
SHOWN_CHARS = 64 * 1024
PURGED_MEANWHILE = "No such job: it was purged meanwhile."
CANCELABLE = frozenset(
    {JobState.PENDING, JobState.SCHEDULED, JobState.RETRYING, JobState.PROCESSING}
)


@dataclass(frozen=True)
class Filters:
    """A listing's filters as the form gave them (None: not filtered)."""

    state: JobState
    queue: str | None
    job_type: str | None
    cursor: str | None

    def args(self, **changes: Any) -> dict[str, str]:
        """Return the filters as query arguments (for links), with `changes` applied."""
        values = {"state": str(self.state), "queue": self.queue, "type": self.job_type}
        values.update(changes)
        return {name: value for name, value in values.items() if value}


def read_filters(default_state: JobState) -> Filters:
    """Return the listing's filters from the query string; UiError 400 for a bad one."""
    raw_state = request.args.get("state") or str(default_state)
    try:
        state = JobState(raw_state)
    except ValueError:
        raise UiError(400, f"unknown state {raw_state[:32]!r}") from None
    queue = request.args.get("queue", "").strip() or None
    if queue is not None and not is_queue_name(queue):
        raise UiError(400, f"bad queue name {queue[:64]!r}: a queue name {QUEUE_RULE}")
    job_type = request.args.get("type", "").strip() or None
    if job_type is not None and not TYPE_PATTERN.fullmatch(job_type):
        raise UiError(400, f"bad job type {job_type[:128]!r}: 1 to 128 of A-Z a-z 0-9 _ . : -")
    return Filters(state, queue, job_type, request.args.get("cursor") or None)


def read_page(filters: Filters) -> tuple[listing.JobPage, bool]:
    """Return one page of the filtered listing (the named queue, else a bounded set of queues:
    shared.read.listing.queues_for), and whether it covered every queue."""
    gw = gateway()
    across = listing.queues_for(gw.scripts, filters.state, filters.queue)
    try:
        page = listing.list_jobs(
            gw.scripts,
            filters.state,
            across.queues,
            limit=PAGE_SIZE,
            cursor=filters.cursor,
            job_type=filters.job_type,
        )
    except listing.BadCursor:
        raise UiError(400, "That page link is not one this dashboard made; start again.") from None
    return page, across.every


@bp.route("/jobs")
def jobs() -> tuple[str, int]:
    """List one state's jobs, filtered by queue and type, a page at a time."""
    filters = read_filters(JobState.PENDING)
    page, every_queue = read_page(filters)
    next_url = None
    if page.next_cursor is not None:
        next_url = url_for("ui.jobs", **filters.args(cursor=page.next_cursor))
    current = f"jobs:{filters.state}" if filters.state in ("scheduled", "retrying") else "jobs"
    return render(
        "jobs.html",
        "jobs",
        nav_current=current,
        filters=filters,
        states=list(JobState),
        jobs=page.jobs,
        next_url=next_url,
        every_queue=every_queue,
        live_events=events_url(queue=filters.queue, type=filters.job_type),
    )


def job_id_of(raw: str) -> str:
    """Return a job id from the path (any case); UiError 400 for something else."""
    job_id = raw.lower()
    if not JOB_ID_PATTERN.fullmatch(job_id):
        raise UiError(400, "That is not a job id.")
    return job_id


def pretty(text: str | None) -> str | None:
    """Return stored JSON indented for reading (as stored, if it is not JSON)."""
    if text is None:
        return None
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


def last_worker(worker_id: str | None, entries: list[history.Entry]) -> str | None:
    """Return the worker that ran the job last: the hash's while it holds one, else the
    history's latest to name one (completing drops the hash's worker_id, failing keeps it)."""
    if worker_id:
        return worker_id
    return next((entry.worker for entry in reversed(entries) if entry.worker), None)


def capped(text: str | None) -> tuple[str | None, int | None]:
    """Return the start of `text` the page shows, and its whole length when it was cut."""
    if text is None or len(text) <= SHOWN_CHARS:
        return text, None
    return text[:SHOWN_CHARS], len(text)


def job_context(job_id: str) -> dict[str, Any]:
    """Return a job and its history for its page; UiError 404 when there is no such job."""
    gw = gateway()
    job = gw.directory.locator.find_job(job_id)
    if job is None:
        raise UiError(404, "No such job: it never existed, or it was purged or trimmed.")
    kept = history.read(gw.redis, gw.keys, job_id, job.queue)
    last = kept.entries[-1] if kept and kept.entries else None
    # Held by a limit (its last transition; a pending job returned to line says so until its
    # claim): the page says what it waits for.
    held = job.status is JobState.PENDING and last is not None and last.event == "held"
    return {
        "waiting": last.error if held and last is not None else None,
        "job": job,
        "worker": last_worker(job.worker_id, kept.entries if kept else []),
        "history": kept.entries if kept else [],
        "dropped": kept.dropped if kept else 0,
        **_shown("payload", pretty(job.payload_json)),
        **_shown("result", pretty(job.result_json)),
        "cancelable": job.status in CANCELABLE,
    }


@bp.route("/jobs/<job_id>")
def job(job_id: str) -> tuple[str, int]:
    """Show one job: status, payload, result, traceback, history, and what can be done."""
    job_id = job_id_of(job_id)
    return render(
        "job.html",
        "job",
        nav_current="jobs",
        live_events=events_url(job=job_id),
        live_refresh=url_for("ui.job_live", job_id=job_id),
        **job_context(job_id),
    )


def _shown(name: str, text: str | None) -> dict[str, Any]:
    start, whole = capped(text)
    return {name: start, f"{name}_chars": whole}


@bp.route("/jobs/<job_id>/<any(payload, result):part>.json")
def job_json(job_id: str, part: str) -> Response:
    """Return a job's payload or result as stored (JSON): whole, where its page shows a start."""
    job = gateway().directory.locator.find_job(job_id_of(job_id))
    text = None if job is None else job.payload_json if part == "payload" else job.result_json
    if text is None:
        raise UiError(404, f"No such job, or it has no {part}.")
    return Response(text, mimetype="application/json")


@bp.route("/jobs/<job_id>/live")
def job_live(job_id: str) -> tuple[str, int]:
    """Return the job page's changing part alone, for live.js to swap in."""
    return render("_job_live.html", "job", **job_context(job_id_of(job_id)))


def confirmed() -> bool:
    """Tell whether this POST is the confirmation page's "yes" (not the first click)."""
    return request.form.get("confirm") == "yes"


def confirm_page(
    title: str, message: str, ids: list[str], back: str, **extra: str
) -> tuple[str, int]:
    """Render the confirmation of an action on `ids`: it posts the same form again, with yes
    (and `extra` fields, such as where to continue from)."""
    dropped = {"csrf", "confirm", *extra}
    fields = [(k, v) for k, v in request.form.items(multi=True) if k not in dropped]
    fields += list(extra.items())
    return render(
        "confirm.html",
        "confirm",
        title=title,
        message=message,
        ids=ids,
        fields=fields,
        action=request.path,
        back=back,
    )


def _located(job_id: str) -> Job:
    job = gateway().directory.locator.find_job(job_id)
    if job is None:
        raise UiError(404, "No such job: it never existed, or it was purged or trimmed.")
    return job


def _on_dead(act: Callable[..., object], job: Job, done: str) -> bool:
    """Run a dead job's action (replay, purge); False, with the reason flashed, when the job
    is no longer dead."""
    try:
        act(gateway(), job.id, queue=job.queue)
    except NotFound:
        raise UiError(404, PURGED_MEANWHILE) from None
    except WrongJobState as exc:
        flash(f"Not {done}: the job is {exc.status} now, not dead.")
        return False
    return True


@bp.route("/jobs/<job_id>/replay", methods=["POST"])
def replay(job_id: str) -> BaseResponse | tuple[str, int]:
    """Replay a dead job (after a confirmation): back to pending with attempts 0."""
    job = _located(job_id_of(job_id))
    back = url_for("ui.job", job_id=job.id)
    if not confirmed():
        message = f"Replay this dead {job.type} job in queue {job.queue}? It runs again."
        return confirm_page("Replay a dead job", message, [job.id], back)
    if not _on_dead(actions.replay, job, "replayed"):
        return redirect(back, code=303)
    flash("Replayed: the job is pending again.")
    return redirect(back, code=303)


@bp.route("/jobs/<job_id>/purge", methods=["POST"])
def purge(job_id: str) -> BaseResponse | tuple[str, int]:
    """Delete a dead job for good (after a confirmation)."""
    job = _located(job_id_of(job_id))
    back = url_for("ui.job", job_id=job.id)
    if not confirmed():
        message = f"Delete this dead {job.type} job in queue {job.queue} for good?"
        return confirm_page("Purge a dead job", message, [job.id], back)
    if not _on_dead(actions.purge, job, "purged"):
        return redirect(back, code=303)
    flash(f"Purged job {job.id}.")
    return redirect(url_for("ui.dlq"), code=303)


@bp.route("/jobs/<job_id>/cancel", methods=["POST"])
def cancel(job_id: str) -> BaseResponse | tuple[str, int]:
    """Cancel a job that has not started, or stop a running one (after a confirmation)."""
    job = _located(job_id_of(job_id))
    back = url_for("ui.job", job_id=job.id)
    if not confirmed():
        if job.status is JobState.PROCESSING:
            grace = gateway().settings.cancel_grace
            message = (
                f"Stop this running {job.type} job in queue {job.queue}? Its worker is "
                f"interrupted (SIGTERM, then SIGKILL after {grace:g} s) and the job ends "
                "canceled, never retried, unless it completes first."
            )
        else:
            message = (
                f"Cancel this {job.status} {job.type} job in queue {job.queue}? It will not run."
            )
        return confirm_page("Cancel a job", message, [job.id], back)
    try:
        outcome = actions.cancel(gateway(), job.id, by=asked_by(), queue=job.queue)
    except NotFound:
        raise UiError(404, PURGED_MEANWHILE) from None
    except WrongJobState as exc:
        flash(f"Not canceled: the job is {exc.status} now.")
        return redirect(back, code=303)
    if outcome.job.status is JobState.PROCESSING:
        flash("Cancel requested: its worker stops it within seconds.")
    else:
        flash("Canceled.")
    return redirect(back, code=303)
