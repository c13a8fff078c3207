"""Commands on the system as a whole: ``stats`` (once or live), ``workers``, ``queues``."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import click

from taskforge.cli import render
from taskforge.cli.command_group import PROG, Exit, Session, cli, fail, output, pass_session
from taskforge.cli.dlq_commands import confirm
from taskforge.cli.job_commands import STATES
from taskforge.cli.paging import paging_options, say_more
from taskforge.models import Host, Queue, Stats, parse_time

CLEAR = "\x1b[H\x1b[2J"  # cursor home, then clear the screen: each refresh redraws in place
STAT_HEADERS = ("QUEUE", *(state.upper() for state in STATES), "TOTAL", "OLDEST PENDING")


def stats_screen(stats: Stats) -> str:
    """Return the statistics as one screen: counts per state overall and per queue, workers."""
    rows: list[list[render.Cell]] = [
        [
            "(all)",
            *(stats.jobs.get(s, 0) for s in STATES),
            stats.total,
            render.age(stats.oldest_pending_age_seconds),
        ]
    ]
    for name in sorted(stats.queues):
        queue = stats.queues[name]
        counts = queue.get("jobs", {})
        age = render.age(queue.get("oldest_pending_age_seconds"))
        rows.append([name, *(counts.get(s, 0) for s in STATES), queue.get("total", 0), age])
    workers = stats.workers
    hosts = workers.get("hosts", 0)
    summary = (
        f"workers: {hosts} host{'' if hosts == 1 else 's'}, {workers.get('live', 0)} live, "
        f"{workers.get('busy', 0)} busy, {workers.get('quiet', 0)} quiet"
    )
    return render.table(STAT_HEADERS, rows) + "\n\n" + summary


@cli.command()
@click.option(
    "--watch",
    "interval",
    type=click.FloatRange(min=0.1),
    is_flag=False,
    flag_value=2.0,
    default=None,
    metavar="[SECONDS]",
    help="Refresh every SECONDS (2 if not given) until Ctrl-C.",
)
@pass_session
def stats(session: Session, interval: float | None) -> int:
    """Show jobs per state, per queue, and the workers.

    Counts over all queues and for each, the oldest pending job's age, the workerd hosts and
    their busy workers. With --watch the screen is redrawn in place; with --json too, one JSON line per refresh.
    """
    if interval is None:
        found = session.client.stats()
        output(session, found.raw, stats_screen(found))
        return Exit.OK
    try:
        while True:
            found = session.client.stats()
            if session.as_json:
                click.echo(json.dumps(found.raw, separators=(",", ":")))
            else:
                now = datetime.now(UTC).strftime("%H:%M:%S")
                title = f"{session.url}  every {interval:g}s  {now}  (Ctrl-C to quit)"
                click.echo(CLEAR + title + "\n\n" + stats_screen(found))
            time.sleep(interval)
    except KeyboardInterrupt:
        return Exit.OK  # the way out of --watch, not an error


HOST_HEADERS = ("NAME", "HOST", "PID", "WORKERS", "BUSY", "STATE", "QUEUES", "LAST SEEN")
PROCESS_HEADERS = ("PID", "JOB", "TYPE", "QUEUE", "BUSY SINCE", "HEARTBEAT")


def host_state(host: Host) -> str:
    """Return whether a host claims jobs, is going quiet, or is quiet."""
    if host.quiet:
        return "quiet"
    return "quieting" if host.quiet_requested else "running"


def workers_screen(hosts: list[Host]) -> str:
    """Return the hosts table, then each host's worker processes."""
    if not hosts:
        return "no live workerd hosts"
    rows = [
        [
            h.name,
            h.host,
            h.pid,
            h.workers,
            h.busy,
            host_state(h),
            ",".join(h.queues) or None,
            render.when(h.last_seen),
        ]
        for h in hosts
    ]
    parts = [render.table(HOST_HEADERS, rows)]
    for host in hosts:
        procs = [
            [
                p.get("pid"),
                p.get("job_id"),
                p.get("type"),
                p.get("queue"),
                render.when(parse_time(p.get("busy_since"))),
                render.when(parse_time(p.get("last_heartbeat"))),
            ]
            for p in host.processes
        ]
        parts.append(f"{host.name}:\n" + render.table(PROCESS_HEADERS, procs))
    return "\n\n".join(parts)


@cli.command()
@pass_session
def workers(session: Session) -> None:
    """Show the live workerd hosts and what each worker process runs."""
    hosts = session.client.workers()
    output(session, {"hosts": [h.raw for h in hosts]}, workers_screen(hosts))


QUEUE_HEADERS = (
    "NAME",
    "STATE",
    *(s.upper() for s in STATES),
    "OLDEST PENDING",
    "DONE/MIN",
    "FAILED/MIN",
    "HELD",
)


def queue_row(queue: Queue) -> list[render.Cell]:
    """Return a queue as one row under QUEUE_HEADERS."""
    return [
        queue.name,
        queue_state(queue),
        *(queue.jobs.get(s, 0) for s in STATES),
        render.age(queue.oldest_pending_age_seconds),
        queue.completed_last_minute,
        queue.failed_last_minute,
        # Pending jobs its limits hold back (counted in PENDING too); "-": it has no limits.
        "-" if queue.limits is None else queue.limits.own.held,
    ]


def queue_state(queue: Queue) -> str:
    """Return a queue's STATE, one word: paused (whether served or not: nothing runs either
    way until a resume; --json has `served`), unserved (no live workerd host serves it: its
    jobs wait until one does), or active (the dashboard's word too)."""
    if queue.paused:
        return "paused"
    return "unserved" if queue.served is False else "active"


@cli.group()
def queues() -> None:
    """List, pause, resume and delete queues."""


@queues.command("ls")
@click.option("--search", help="Only queues whose name contains this.")
@paging_options(1000, "Queues per page (every queue while they fit).")
@pass_session
def queues_ls(
    session: Session, search: str | None, limit: int, cursor: str | None, every: bool
) -> None:
    """List queues: paused, unserved (no live workerd host serves it) or active; jobs per
    state, the last minute's throughput."""
    if every:
        found, next_cursor = session.client.queues(search=search), None
    else:
        found, next_cursor = session.client.queue_page(limit=limit, cursor=cursor, search=search)
    text = render.table(QUEUE_HEADERS, [queue_row(q) for q in found]) if found else "no queues"
    output(session, {"queues": [q.raw for q in found], "next_cursor": next_cursor}, text)
    say_more(session, next_cursor)


@queues.command("pause")
@click.argument("name")
@pass_session
def queues_pause(session: Session, name: str) -> None:
    """Pause a queue: jobs still arrive; no worker claims them until it is resumed."""
    known = is_known(session, name)
    queue = session.client.pause_queue(name)
    output(session, queue.raw, f"{queue.name} paused")
    if not known:
        # The gateway lists a queue from its first pause: a typo would stay listed.
        note(f"no queue {name!r} was known; it is listed from now on")


def is_known(session: Session, name: str) -> bool:
    """Tell whether the gateway lists a queue of this name (before a pause or resume)."""
    return name in {queue.name for queue in session.client.queues(search=name)}


def note(text: str) -> None:
    """Say something worth knowing on stderr (a pause or resume of a queue nobody knew)."""
    click.echo(f"{PROG}: note: {text}", err=True)


@queues.command("resume")
@click.argument("name")
@pass_session
def queues_resume(session: Session, name: str) -> None:
    """Resume a paused queue."""
    known = is_known(session, name)
    queue = session.client.resume_queue(name)
    output(session, queue.raw, f"{queue.name} {queue_state(queue)}")
    if not known:
        note(f"no queue {name!r} is known: nothing was paused there")


@queues.command("rm")
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@pass_session
def queues_rm(session: Session, name: str, yes: bool) -> int:
    """Delete an empty queue, its completed and canceled jobs and events with it (asks first).

    Refused while the queue holds a pending, held, scheduled, retrying, processing or dead job,
    is paused or limited, or a workerd host serves it (the error says which).

    \b
    taskforge queues rm reports-old --yes
    """
    if not yes and not confirm(f"Delete queue {name!r}, its finished jobs and events?"):
        return fail("not confirmed: nothing deleted (--yes skips the question)", Exit.API_ERROR)
    session.client.delete_queue(name)
    output(session, {"deleted": name}, f"{name} deleted")
    return Exit.OK
