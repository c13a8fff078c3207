"""Commands on jobs: enqueue, get, wait, history, cancel, and ``jobs ls``."""

from __future__ import annotations

import json
import shlex
import sys
import uuid
from typing import Any

import click

from taskforge.cli import render
from taskforge.cli.command_group import PROG, Exit, Session, cli, fail, output, pass_session
from taskforge.cli.paging import collect, paging_options, print_page
from taskforge.errors import JobCanceled, JobError, JobFailed, Unavailable, WaitTimeout
from taskforge.models import HistoryEntry, Job, JobPage

STATES = ("pending", "scheduled", "processing", "retrying", "completed", "dead", "canceled")

ENQUEUE_HELP = """Enqueue a job of TYPE; print its id (or the job with --json).

\b
PAYLOAD is the job's payload, a JSON object, given one of three ways:
  '{"to": "a@example.com"}'   inline JSON
  @job.json                    the contents of a file
  -                            standard input
Without PAYLOAD the payload is {}.

\b
Examples:
  taskforge enqueue send_email '{"to": "a@example.com"}'
  taskforge enqueue generate_pdf @order.json --queue reports --delay 5m
  echo '{"n": 1}' | taskforge enqueue count - --priority 10 --idempotency-key order-42
"""


def load_payload(text: str | None) -> dict[str, Any]:
    """Return the payload PAYLOAD names (inline JSON, @file or - for stdin) as a JSON object."""
    if text is None:
        return {}
    if text == "-":
        source, where = sys.stdin.read(), "standard input"
    elif text.startswith("@"):
        path = text[1:]
        try:
            with open(path, encoding="utf-8") as file:
                source = file.read()
        except OSError as exc:
            raise click.BadParameter(
                f"cannot read {path!r}: {exc.strerror or exc}", param_hint="PAYLOAD"
            ) from None
        where = path
    else:
        source, where = text, "PAYLOAD"
    try:
        doc = json.loads(source)
    except ValueError as exc:
        raise click.BadParameter(
            f"{where} is not valid JSON: {exc}", param_hint="PAYLOAD"
        ) from None
    if not isinstance(doc, dict):
        raise click.BadParameter(
            f"{where} must be a JSON object, not {type(doc).__name__}", param_hint="PAYLOAD"
        )
    return doc


def duration(text: str | None) -> float | str | None:
    """Return a duration option as the client takes it: seconds as a number, else the text."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return text  # "5m", "90s": the gateway parses and checks it


@cli.command(help=ENQUEUE_HELP)
@click.argument("job_type", metavar="TYPE")
@click.argument("payload", required=False)
@click.option("--queue", help="The queue it waits in (default: default).")
@click.option("--priority", type=int, help="Higher runs first (default 0).")
@click.option("--max-retries", type=int, help="How many executions it may take in all (default 3).")
@click.option("--at", metavar="RFC3339", help="Run it no earlier than this time (with a zone).")
@click.option("--delay", metavar="DURATION", help="Run it this long from now: 30, 90s, 5m, 1h.")
@click.option("--timeout", metavar="DURATION", help="How long one execution may run: 90s, 5m.")
@click.option("--idempotency-key", metavar="KEY", help="Repeat with the same key: one job.")
@pass_session
def enqueue(
    session: Session,
    job_type: str,
    payload: str | None,
    queue: str | None,
    priority: int | None,
    max_retries: int | None,
    at: str | None,
    delay: str | None,
    timeout: str | None,
    idempotency_key: str | None,
) -> None:
    """Enqueue one job."""
    if at is not None and delay is not None:
        raise click.UsageError("give --at or --delay, not both")
    body = load_payload(payload)
    # Our own key, not the client's hidden one: a not_replicated answer must name it, so the
    # resend the message advises is the same request (one job, confirmed).
    key = idempotency_key or f"tf-{uuid.uuid4().hex}"
    try:
        job = session.client.enqueue(
            job_type,
            body,
            queue=queue,
            priority=priority,
            max_retries=max_retries,
            at=at,
            delay=duration(delay),
            timeout=duration(timeout),
            idempotency_key=key,
        )
    except Unavailable as exc:
        if exc.body.get("code") != "not_replicated":
            raise
        options = {
            "--queue": queue,
            "--priority": priority,
            "--max-retries": max_retries,
            "--at": at,
            "--delay": delay,
            "--timeout": timeout,
        }
        # Standard input is read once: the resend carries the payload inline instead.
        shown = json.dumps(body, separators=(",", ":")) if payload == "-" else payload
        resend = [PROG, "enqueue", job_type, *([shown] if shown is not None else [])]
        for name, value in options.items():
            if value is not None:
                resend += [name, str(value)]
        resend += ["--idempotency-key", key]
        raise Unavailable(
            f"job {exc.body.get('job_id')} is on the primary, but only "
            f"{exc.body.get('replicas')} of {exc.body.get('wanted')} replicas confirmed it in "
            f"time (idempotency key {key}); resend it, to confirm it without a second job: "
            f"{shlex.join(resend)}",
            body=exc.body,
        ) from None
    output(session, job.raw, job.id)
    for warning in job.warnings:  # stderr: stdout stays the id (or the JSON) alone
        click.echo(f"{PROG}: warning: {warning}", err=True)


@cli.command()
@click.argument("job_id", metavar="ID")
@pass_session
def get(session: Session, job_id: str) -> None:
    """Show a job: its state, attempts, payload, result or last error."""
    job = session.client.get(job_id)
    output(session, job.raw, render.job_detail(job))


@cli.command()
@click.argument("job_id", metavar="ID")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=None,
    help="Give up after this many seconds (exit 7); default: wait as long as it takes.",
)
@pass_session
def wait(session: Session, job_id: str, timeout: float | None) -> int:
    """Wait for a job to finish; show it; exit 0 if it completed.

    Exit 5 if it died, 6 if it was canceled, 7 if it was still unfinished after --timeout.
    The gateway holds each request until the job finishes, so nothing polls.
    """
    try:
        job = session.client.wait(job_id, timeout=timeout)
    except JobError as exc:
        show_job(session, exc.job)
        return fail(str(exc) + _pending_hint(exc), wait_code(exc))
    show_job(session, job)
    return Exit.OK


def _pending_hint(exc: JobError) -> str:
    """Return where to look when a wait timed out on a job nothing has claimed: most often
    no workerd host serves its queue, or the queue is paused (no request more to find out)."""
    if not isinstance(exc, WaitTimeout) or exc.job.status != "pending":
        return ""
    queue = exc.job.queue
    return f" (is its queue {queue!r} paused, or served by no workerd host? see `{PROG} queues ls`)"


def wait_code(exc: JobError) -> int:
    """Return the exit status for a wait that ended without a completed job."""
    if isinstance(exc, JobFailed):
        return Exit.DEAD
    if isinstance(exc, JobCanceled):
        return Exit.CANCELED
    return Exit.WAIT_TIMEOUT


def show_job(session: Session, job: Job) -> None:
    """Print a job as ``get`` does."""
    output(session, job.raw, render.job_detail(job))


@cli.command()
@click.argument("job_id", metavar="ID")
@pass_session
def history(session: Session, job_id: str) -> None:
    """Show what happened to a job, oldest first.

    Each transition (its last 50): when, the event, the attempt, who acted, the worker.
    """
    kept = session.client.history(job_id)
    rows = [
        [render.when(e.at), e.event, e.attempt, e.actor, e.worker, e.host, _detail(e)]
        for e in kept.entries
    ]
    text = render.table(("AT", "EVENT", "ATTEMPT", "ACTOR", "WORKER", "HOST", "DETAIL"), rows)
    if kept.dropped:
        text += f"\n({kept.dropped} older transitions no longer kept)"
    output(session, kept.raw, text)


def _detail(entry: HistoryEntry) -> str | None:
    """Return an entry's last column: the error's type, who asked a cancel, how it stopped, or
    which limit held it."""
    if entry.reason:
        return f"{entry.reason} limit"
    if entry.by:
        return f"asked by {entry.by}"
    if entry.stopped:
        return f"stopped: {entry.stopped}"
    return entry.error


@cli.command()
@click.argument("job_id", metavar="ID")
@click.option("--by", default=None, help="Who asks, kept with a running job's request.")
@click.option(
    "--wait", "wait_end", is_flag=True, help="Wait until the job has ended; exit 0 if canceled."
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=None,
    help="With --wait: give up after this many seconds (exit 7).",
)
@pass_session
def cancel(
    session: Session, job_id: str, by: str | None, wait_end: bool, timeout: float | None
) -> int:
    """Cancel a job; a running one is stopped.

    A job not started is canceled at once. A running one: "cancel requested"; its worker is
    stopped within seconds (SIGTERM, then SIGKILL after WORKER_CANCEL_GRACE) and the job
    ends canceled, unless it completes first. With --wait: exit 0 once canceled, 1 if it
    completed first. A completed or dead job cannot be canceled: a conflict (exit 1).
    """
    job = session.client.cancel(job_id, by=by)
    if job.status == "processing":
        output(session, job.raw, f"{job.id} cancel requested (still processing)")
    else:
        output(session, job.raw, f"{job.id} {job.status}")
    if not wait_end or job.status != "processing":
        return Exit.OK
    try:
        ended = session.client.wait(job_id, timeout=timeout)
    except JobCanceled as exc:
        show_job(session, exc.job)
        return Exit.OK
    except JobError as exc:
        show_job(session, exc.job)
        return fail(str(exc), wait_code(exc))
    show_job(session, ended)
    return fail(f"job {ended.id} completed before its cancel took effect", Exit.API_ERROR)


@cli.group()
def jobs() -> None:
    """List jobs."""


@jobs.command("ls")
@click.option(
    "--state",
    type=click.Choice(STATES),
    help="The state to list (default: every state, in lifecycle order).",
)
@click.option("--queue", help="Only this queue.")
@click.option("--type", "job_type", metavar="TYPE", help="Only jobs of this type.")
@paging_options(1000, "Jobs per page.")
@pass_session
def jobs_ls(
    session: Session,
    state: str | None,
    queue: str | None,
    job_type: str | None,
    limit: int,
    cursor: str | None,
    every: bool,
) -> None:
    """List one state's jobs in its order (pending: claim order; finished: newest first), or
    without --state every state's: processing, pending, scheduled, retrying, completed, dead,
    canceled (STATUS says each job's)."""

    def page(after: str | None) -> JobPage:
        return session.client.list(state, queue=queue, type=job_type, limit=limit, cursor=after)

    listed, next_cursor = collect(page, cursor, every)
    if state in ("scheduled", "retrying"):
        print_page(session, listed, next_cursor, render.WAITING_HEADERS, render.waiting_row)
    else:
        print_page(session, listed, next_cursor, render.JOB_HEADERS, render.job_row)
