"""Commands on the dead-letter queue: ``dlq ls``, ``dlq retry`` and ``dlq purge``.

A bulk action names its jobs by id, or by a filter (``--queue``, ``--type``, ``--all``) that
the gateway applies one page at a time: the command follows ``next_cursor`` to the end.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import click

from taskforge.cli import render
from taskforge.cli.command_group import Exit, Session, cli, fail, output, pass_session
from taskforge.cli.paging import collect, paging_options, print_page
from taskforge.client import BATCH_MAX
from taskforge.models import BulkResult, Job, JobPage

DLQ_HEADERS = ("ID", "TYPE", "QUEUE", "ATTEMPTS", "DIED", "LAST ERROR")
Action = Callable[..., BulkResult]  # Client.replay_dead or Client.purge_dead


def dead_row(job: Job) -> list[render.Cell]:
    """Return a dead job as one row under DLQ_HEADERS."""
    died = job.finished_at or job.updated_at
    return [
        job.id,
        job.type,
        job.queue,
        job.attempts,
        render.when(died),
        render.one_line(job.last_error),
    ]


@cli.group()
def dlq() -> None:
    """List, replay and purge dead jobs."""


@dlq.command("ls")
@click.option("--queue", help="Only this queue's dead jobs.")
@click.option("--type", "job_type", metavar="TYPE", help="Only dead jobs of this type.")
@paging_options(100, "Jobs per page.")
@pass_session
def dlq_ls(
    session: Session,
    queue: str | None,
    job_type: str | None,
    limit: int,
    cursor: str | None,
    every: bool,
) -> None:
    """List dead jobs, newest first, with their last error."""

    def page(after: str | None) -> JobPage:
        if queue is None and job_type is None:
            return session.client.dlq(limit=limit, cursor=after)
        # GET /dlq takes no filter; the listing of the dead state does, in the same order.
        return session.client.list("dead", queue=queue, type=job_type, limit=limit, cursor=after)

    listed, next_cursor = collect(page, cursor, every)
    print_page(session, listed, next_cursor, DLQ_HEADERS, dead_row)


def bulk_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add the arguments and options every bulk action takes."""
    decorators = [
        click.argument("ids", metavar="[ID]...", nargs=-1),
        click.option("--queue", help="Every dead job of this queue."),
        click.option("--type", "job_type", metavar="TYPE", help="Every dead job of this type."),
        click.option("--all", "every", is_flag=True, help="Every dead job."),
        click.option(
            "--page",
            type=click.IntRange(1, 1000),
            default=100,
            show_default=True,
            help="Jobs per request when a filter names them.",
        ),
    ]
    for decorator in reversed(decorators):
        command = decorator(command)
    return command


@dlq.command("retry")
@bulk_options
@pass_session
def dlq_retry(
    session: Session,
    ids: tuple[str, ...],
    queue: str | None,
    job_type: str | None,
    every: bool,
    page: int,
) -> None:
    """Replay dead jobs (back to pending, attempts 0): the IDs given, or those a filter names.

    \b
    taskforge dlq retry 3f2a... 9c1b...
    taskforge dlq retry --queue reports --type generate_pdf
    taskforge dlq retry --all
    """
    check_selection(ids, queue, job_type, every)
    result = act(
        session, session.client.replay_dead, "replaying", ids, queue, job_type, every, page
    )
    report(session, result, "replayed")


@dlq.command("purge")
@bulk_options
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@pass_session
def dlq_purge(
    session: Session,
    ids: tuple[str, ...],
    queue: str | None,
    job_type: str | None,
    every: bool,
    page: int,
    yes: bool,
) -> int:
    """Delete dead jobs for good: the IDs given, or those a filter names (asks first).

    \b
    taskforge dlq purge 3f2a...
    taskforge dlq purge --queue reports --yes
    """
    check_selection(ids, queue, job_type, every)
    if not yes and not confirm(f"Purge {describe(session, ids, queue, job_type)} for good?"):
        return fail("not confirmed: nothing purged (--yes skips the question)", Exit.API_ERROR)
    result = act(session, session.client.purge_dead, "purging", ids, queue, job_type, every, page)
    report(session, result, "purged")
    return Exit.OK


def check_selection(
    ids: Sequence[str], queue: str | None, job_type: str | None, every: bool
) -> None:
    """Refuse a bulk action that names no jobs, or names them both ways."""
    filtered = queue is not None or job_type is not None or every
    if ids and filtered:
        raise click.UsageError("give IDs or a filter (--queue, --type, --all), not both")
    if not ids and not filtered:
        raise click.UsageError("name the dead jobs: IDs, --queue, --type or --all")


def confirm(question: str) -> bool:
    """Ask on the terminal; no answer (end of input) is a no."""
    try:
        return click.confirm(question, default=False, err=True)
    except click.Abort:
        return False


def describe(session: Session, ids: Sequence[str], queue: str | None, job_type: str | None) -> str:
    """Return what a bulk action takes, in words, with a count when one is known."""
    if ids:
        return f"the {len(ids)} job{'s' if len(ids) != 1 else ''} given (those dead)"
    words = "every dead job"
    if job_type is not None:
        words += f" of type {job_type}"
    if queue is not None:
        words += f" in queue {queue}"
    count = dead_count(session, queue)
    if count is not None and job_type is None:
        words += f" ({count} now)"
    return words


def dead_count(session: Session, queue: str | None) -> int | None:
    """Return how many jobs are dead (in one queue, or all), an upper bound for a filter."""
    stats = session.client.stats()
    if queue is None:
        return stats.jobs.get("dead")
    counts = stats.queues.get(queue)
    return None if counts is None else counts.get("jobs", {}).get("dead")


def pages(
    action: Action,
    ids: Sequence[str],
    queue: str | None,
    job_type: str | None,
    every: bool,
    page: int,
) -> Iterator[BulkResult]:
    """Yield the result of each request: ids 1,000 at a time, or a filter page by page."""
    if ids:
        for start in range(0, len(ids), BATCH_MAX):
            yield action(list(ids[start : start + BATCH_MAX]))
        return
    cursor: str | None = None
    while True:
        result = action(queue=queue, type=job_type, all=every, limit=page, cursor=cursor)
        yield result
        if result.next_cursor is None:
            return
        cursor = result.next_cursor


def act(
    session: Session,
    action: Action,
    label: str,
    ids: Sequence[str],
    queue: str | None,
    job_type: str | None,
    every: bool,
    page: int,
) -> BulkResult:
    """Run a bulk action to the end (a progress bar on a terminal); return what it did in all."""
    done: list[str] = []
    skipped: list[dict[str, str]] = []
    steps = pages(action, ids, queue, job_type, every, page)
    if not sys.stderr.isatty():
        for result in steps:
            done += result.done
            skipped += result.skipped
    else:
        total = len(ids) if ids else dead_count(session, queue) or 0
        with click.progressbar(length=total, label=label, file=sys.stderr) as bar:
            for result in steps:
                done += result.done
                skipped += result.skipped
                bar.update(len(result.done) + len(result.skipped))
    raw = {"done": done, "skipped": skipped, "next_cursor": None}
    return BulkResult(done, skipped, None, raw)


def report(session: Session, result: BulkResult, verb: str) -> None:
    """Print what a bulk action did: counts and each skipped id with the reason."""
    lines = [f"{verb} {len(result.done)}, skipped {len(result.skipped)}"]
    lines += [f"skipped {item.get('id')}: {item.get('reason')}" for item in result.skipped]
    output(session, result.raw, "\n".join(lines))
