"""``limits``: the concurrency and rate limits of queues and of job types in them.

``limits ls`` shows each limited queue's own limits and its types', with the jobs running in
their slots and the pending jobs they hold back; ``limits set`` and ``limits clear`` change
one scope (the queue's own, or one type's with --type) and leave the others as they are.
"""

from __future__ import annotations

import click

from taskforge.cli import render
from taskforge.cli.command_group import Session, cli, output, pass_session
from taskforge.models import Limits

HEADERS = ("QUEUE", "SCOPE", "CONCURRENCY", "RATE", "RUNNING", "HELD")


def limits_rows(found: list[Limits]) -> list[list[render.Cell]]:
    """Return one row per scope: a queue's own ("(queue)", when it has a queue-wide limit),
    then each of its types. Without a queue-wide limit, a "(queue)" row's running and held
    counts (the queue's totals) would read as a limit of the queue's holding them."""
    rows: list[list[render.Cell]] = []
    for limits in found:
        own = limits.own
        if not (own.concurrency or own.rate) and limits.types:
            rows.extend(_type_rows(limits))
            continue
        rows.append(
            [
                limits.queue,
                "(queue)",
                own.concurrency or "-",
                own.rate or "-",
                own.running,
                own.held,
            ]
        )
        rows.extend(_type_rows(limits))
    return rows


def _type_rows(limits: Limits) -> list[list[render.Cell]]:
    return [
        [limits.queue, name, scope.concurrency or "-", scope.rate or "-", scope.running, scope.held]
        for name, scope in sorted(limits.types.items())
    ]


@cli.group()
def limits() -> None:
    """List, set and clear concurrency and rate limits (per queue, and per job type in one)."""


@limits.command("ls")
@pass_session
def limits_ls(session: Session) -> None:
    """List every limited queue: its limits and its types', running and held jobs of each.

    RUNNING counts the jobs in a scope's slots; HELD the pending jobs its limits hold back
    (they are pending: `taskforge queues ls` counts them there).
    """
    found = session.client.limits()
    text = render.table(HEADERS, limits_rows(found)) if found else "no limits"
    output(session, {"queues": [f.raw for f in found]}, text)


QUEUE = click.option("--queue", "-q", default="default", show_default=True, help="The queue.")
TYPE = click.option("--type", "-t", "job_type", default=None, help="One job type in the queue.")


@limits.command("set")
@QUEUE
@TYPE
@click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(min=1),
    help="At most N running at once (fleet-wide).",
)
@click.option(
    "--rate", "-r", metavar="N/PERIOD", help="At most N started per PERIOD: 100/1m, 5/500ms."
)
@pass_session
def limits_set(
    session: Session, queue: str, job_type: str | None, concurrency: int | None, rate: str | None
) -> None:
    """Set the limits of a queue, or of one job type in it (--type): both kinds at once.

    A kind not given is no limit of that kind for that scope; other scopes stay as they are.
    """
    if concurrency is None and rate is None:
        raise click.UsageError("give --concurrency and/or --rate (`limits clear` removes them)")
    found = session.client.set_limits(queue, type=job_type, concurrency=concurrency, rate=rate)
    output(session, found.raw, render.table(HEADERS, limits_rows([found])))


@limits.command("clear")
@QUEUE
@TYPE
@pass_session
def limits_clear(session: Session, queue: str, job_type: str | None) -> None:
    """Remove a queue's limits (its own and every type's), or with --type that type's only.

    Jobs they held become claimable at once.
    """
    found = session.client.clear_limits(queue, type=job_type)
    rows = limits_rows([found]) if found.own.concurrency or found.own.rate or found.types else []
    text = render.table(HEADERS, rows) if rows else f"{queue}: no limits"
    output(session, found.raw, text)
