"""Actions on what workerd runs: quiet or resume a host, pause or resume a periodic schedule.

A host applies a quiet or resume request at its next registry heartbeat (within 2 s); a
schedule's pause takes effect at its next tick.
"""

from __future__ import annotations

import logging

from gateway.actions.action_errors import NotFound
from gateway.context import Gateway
from shared.engine.engine_types import HostNotFound, ScheduleNotFound

log = logging.getLogger(__name__)


def quiet_host(gw: Gateway, name: str, quiet: bool, *, by: str) -> bool | None:
    """Ask a host to finish its running jobs and claim nothing more (`quiet`), or to claim
    again; return the quiet state it applied last (None before its first report of one)."""
    try:
        applied = gw.scripts.quiet_host(name, quiet)
    except HostNotFound:
        raise NotFound("workerd host not found") from None
    event = "quiet_requested" if quiet else "resume_requested"
    log.info(event, extra={"supervisor": name, "by": by})
    return applied


def pause_schedule(gw: Gateway, name: str, *, by: str) -> bool:
    """Pause a schedule (its ticks pass without jobs); return whether this call paused it."""
    try:
        changed = gw.scripts.pause_schedule(name).changed
    except ScheduleNotFound:
        raise NotFound("schedule not found") from None
    log.info("schedule_paused", extra={"schedule": name, "changed": changed, "by": by})
    return changed


def resume_schedule(gw: Gateway, name: str, *, by: str) -> bool:
    """Resume a schedule from its next tick (the ticks it was paused for never run); return
    whether it was paused."""
    try:
        changed = gw.scripts.resume_schedule(name)
    except ScheduleNotFound:
        raise NotFound("schedule not found") from None
    log.info("schedule_resumed", extra={"schedule": name, "changed": changed, "by": by})
    return changed
