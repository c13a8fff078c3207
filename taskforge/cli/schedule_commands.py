"""``taskforge schedules ls|pause|resume``: the periodic schedules workerd publishes."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import click

from taskforge.cli import render
from taskforge.cli.command_group import Session, cli, output, pass_session
from taskforge.models import Schedule

SCHEDULE_HEADERS = (
    "NAME",
    "WHEN",
    "ZONE",
    "ON MISS",  # the policy for ticks missed while no workerd ran: skip or catch_up
    "MISSED",  # how many ticks got no job of their own
    "STATE",
    "JOB",
    "LAST TICK",
    "LAST JOB",
    "NEXT RUN",
)


def zoned_text(moment: datetime, zone: str) -> str:
    """Return a time in `zone` to the second, named after it: ``2026-12-06 09:00:00 Europe/Paris``.

    In the hour a fall-back repeats, the offset follows (``... Europe/Berlin UTC+02:00``): the
    wall-clock time alone would name two instants. The dashboard's Periodic page writes the
    same (gateway.ui.schedule_pages); this package does not import the server's.
    """
    local = moment.astimezone(ZoneInfo(zone))
    text = f"{local.replace(tzinfo=None, microsecond=0).isoformat(sep=' ')} {zone}"
    if local.replace(fold=1 - local.fold).utcoffset() != local.utcoffset():
        text += f" UTC{local.isoformat()[-6:]}"
    return text


def in_its_zone(schedule: Schedule, moment: datetime | None) -> str:
    """Return one of a schedule's times (last tick, a next run) in its zone, or a dash."""
    return render.NONE if moment is None else zoned_text(moment, schedule.timezone)


def next_run(schedule: Schedule) -> str:
    """Return the next run, or that a paused schedule has none until it is resumed."""
    if schedule.paused:
        return "(paused)"
    return in_its_zone(schedule, schedule.next_runs[0] if schedule.next_runs else None)


def schedule_row(schedule: Schedule) -> list[render.Cell]:
    """Return a schedule as one row under SCHEDULE_HEADERS."""
    job = schedule.job
    return [
        schedule.name,
        f"cron {schedule.cron}" if schedule.cron else f"every {schedule.every}",
        schedule.timezone,  # an interval's ticks are UTC's, as its times say
        schedule.missed,
        schedule.missed_ticks,
        "paused" if schedule.paused else "active",  # the dashboard's words
        f"{job.get('type')} on {job.get('queue')}",
        in_its_zone(schedule, schedule.last_tick),
        schedule.last_job_id,
        next_run(schedule),
    ]


def schedule_detail(schedule: Schedule) -> str:
    """Return one schedule's state after a pause or a resume: its next runs when active."""
    if schedule.paused:
        return f"{schedule.name} paused: its ticks pass without jobs until it is resumed"
    runs = "\n".join(f"  {in_its_zone(schedule, run)}" for run in schedule.next_runs)
    return f"{schedule.name} active; next runs:\n{runs}"


@cli.group()
def schedules() -> None:
    """List, pause and resume periodic schedules (TASKFORGE_SCHEDULES on workerd)."""


@schedules.command("ls")
@pass_session
def schedules_ls(session: Session) -> None:
    """List every schedule: when it ticks, paused or not, its last tick and job, next run."""
    found = session.client.schedules()
    text = render.table(SCHEDULE_HEADERS, [schedule_row(s) for s in found])
    if not found:
        text = "no periodic schedules (workerd publishes its TASKFORGE_SCHEDULES file at start)"
    output(session, {"schedules": [s.raw for s in found]}, text)


@schedules.command("pause")
@click.argument("name")
@pass_session
def schedules_pause(session: Session, name: str) -> None:
    """Pause a schedule: its ticks pass without jobs until it is resumed."""
    schedule = session.client.pause_schedule(name)
    output(session, schedule.raw, schedule_detail(schedule))


@schedules.command("resume")
@click.argument("name")
@pass_session
def schedules_resume(session: Session, name: str) -> None:
    """Resume a schedule at its next tick (the ticks it was paused for do not run)."""
    schedule = session.client.resume_schedule(name)
    output(session, schedule.raw, schedule_detail(schedule))
