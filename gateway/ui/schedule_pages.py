"""The periodic schedules page: each schedule, its next runs, and its pause and resume."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from flask import flash, redirect, url_for
from markupsafe import Markup
from werkzeug.wrappers import Response as BaseResponse

from gateway.actions import fleet_actions as fleet
from gateway.actions.action_errors import NotFound
from gateway.context import gateway
from gateway.ui.ui_base import UiError, asked_by, bp, breakable, live_page, render
from shared.model.schedules import NAME_PATTERN, NAME_RULE
from shared.read.schedule_state import view_schedules

# A tick's job is an `enqueued` event in its queue's stream: the page refreshes on those (a
# pause or a resume is a page of its own, redirected back to).
SCHEDULE_EVENTS = "enqueued gap"


def zoned_text(moment: datetime, zone: str) -> str:
    """Return a time in `zone` to the second, named after it: ``2026-12-06 09:00:00 Europe/Paris``.

    In the hour a fall-back repeats, the offset follows (``... Europe/Berlin UTC+02:00``): the
    wall-clock time alone would name two instants. taskforge.cli.schedule_commands writes the same.
    """
    local = moment.astimezone(ZoneInfo(zone))
    text = f"{local.replace(tzinfo=None, microsecond=0).isoformat(sep=' ')} {zone}"
    if local.replace(fold=1 - local.fold).utcoffset() != local.utcoffset():
        text += f" UTC{local.isoformat()[-6:]}"
    return text


@bp.app_template_filter("zoned")
def zoned(moment: datetime | int | None, zone: str) -> Markup:
    """Show a schedule's time (a datetime, or Redis-clock epoch ms) in its zone, then how far.

    The zoned text is the time itself; the <time> after it is empty until times.js fills it
    with "in 3 min" or "5 s ago" (its datetime keeps the zone's offset, its title the text).
    """
    if moment is None:
        return Markup("—")
    if isinstance(moment, int):
        moment = datetime.fromtimestamp(moment / 1000, tz=UTC)
    text = zoned_text(moment, zone)
    local = moment.astimezone(ZoneInfo(zone)).isoformat(timespec="seconds")
    clock, _, rest = text.partition(f" {zone}")
    return Markup(
        '<span class="zoned">{0} {1}{2}</span> <time class="ago" datetime="{3}" title="{4}"></time>'
    ).format(clock, breakable(zone), rest, local, text)


@bp.route("/schedules")
def schedules() -> tuple[str, int]:
    """Show every periodic schedule: when it ticks, its last tick and job, the next runs."""
    gw = gateway()
    views = view_schedules(gw.redis, gw.keys)
    return live_page(
        "schedules.html", "schedules", "ui.schedules_live", live_on=SCHEDULE_EVENTS, views=views
    )


@bp.route("/live/schedules")
def schedules_live() -> tuple[str, int]:
    """Return the schedules table alone, for live.js to swap in."""
    gw = gateway()
    return render("_schedules_live.html", "schedules", views=view_schedules(gw.redis, gw.keys))


def _name(name: str) -> str:
    if not NAME_PATTERN.fullmatch(name):
        raise UiError(400, f"bad schedule name {name[:64]!r}: a schedule name is {NAME_RULE}")
    return name


def _set_paused(name: str, paused: bool) -> BaseResponse:
    name = _name(name)
    act = fleet.pause_schedule if paused else fleet.resume_schedule
    try:
        changed = act(gateway(), name, by=asked_by())
    except NotFound:
        raise UiError(404, "No workerd host published a schedule of that name.") from None
    if paused:
        flash(f"Schedule {name} paused: its ticks pass without jobs until it is resumed.")
    else:
        flash(
            f"Schedule {name} resumed from its next tick."
            if changed
            else f"Schedule {name} was not paused."
        )
    return redirect(url_for("ui.schedules"), code=303)


@bp.route("/schedules/<name>/pause", methods=["POST"])
def pause_schedule(name: str) -> BaseResponse:
    """Pause a schedule (as POST /schedules/<name>/pause does) and go back to the list."""
    return _set_paused(name, True)


@bp.route("/schedules/<name>/resume", methods=["POST"])
def resume_schedule(name: str) -> BaseResponse:
    """Resume a schedule at its next tick and go back to the list."""
    return _set_paused(name, False)
