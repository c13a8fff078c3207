"""Paged listings in the CLI (jobs ls, dlq ls, queues ls): their --limit/--cursor/--all
options, reading one page or following the cursors, and printing a page with how to go on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from taskforge.cli import render
from taskforge.cli.command_group import Session, output
from taskforge.models import Job, JobPage


def paging_options(maximum: int, per_page: str) -> Any:
    """Add the `--limit/--cursor/--all` options every paged listing takes (`per_page`: the
    help of --limit; `maximum`: the largest page the gateway serves)."""
    decorators = [
        click.option(
            "--limit",
            type=click.IntRange(1, maximum),
            default=50,
            show_default=True,
            help=per_page,
        ),
        click.option("--cursor", help="Start where a previous page ended (its 'more: --cursor')."),
        click.option("--all", "every", is_flag=True, help="Follow the cursors to the end."),
    ]

    def decorate(command: Any) -> Any:
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return decorate


def say_more(session: Session, next_cursor: str | None) -> None:
    """Tell how to read the next page, if there is one (not in --json: the cursor is in it)."""
    if next_cursor is not None and not session.as_json:
        # On stderr: a script reading the table gets rows only.
        click.echo(f"more: --cursor {next_cursor}", err=True)


def collect(
    page: Callable[[str | None], JobPage], cursor: str | None, every: bool
) -> tuple[list[Job], str | None]:
    """Return the jobs of the page at `cursor` (of every page after it too, with `every`) and
    the cursor after the last page read (None at the end)."""
    found = page(cursor)
    listed, next_cursor = list(found.jobs), found.next_cursor
    while every and next_cursor is not None:
        found = page(next_cursor)
        listed += found.jobs
        next_cursor = found.next_cursor
    return listed, next_cursor


def print_page(
    session: Session,
    listed: list[Job],
    next_cursor: str | None,
    headers: tuple[str, ...],
    row: Any,
) -> None:
    """Print listed jobs (a table, or the listing's JSON) and how to go on, if there is more."""
    doc = {"jobs": [job.raw for job in listed], "next_cursor": next_cursor}
    text = render.table(headers, [row(job) for job in listed]) if listed else "no jobs"
    output(session, doc, text)
    say_more(session, next_cursor)
