"""Actions on queues: pause, resume, delete an empty one, set or clear its limits.

Each write that may list a queue anew (a pause, a limit) lists it after the write, whatever
this process remembers: a delete racing it then either saw the flag or the limits (and
refused) or left the name for this call to list (shared.read.queue_removal).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gateway.actions.action_errors import Conflict, NotFound, QueueInUse
from gateway.context import Gateway
from shared.engine import limits
from shared.model import limit_rules
from shared.model.limit_rules import Limit, QueueLimits
from shared.read import queue_removal

log = logging.getLogger(__name__)


def pause_queue(gw: Gateway, name: str, *, by: str) -> bool:
    """Pause a queue (listing it if it is new): no worker claims from it until resumed.
    Return whether this call paused it (False: it already was)."""
    result = gw.scripts.pause_queue(name)
    gw.directory.relist(name)
    log.info("queue_paused", extra={"queue": name, "changed": result.changed, "by": by})
    return result.changed


def resume_queue(gw: Gateway, name: str, *, by: str) -> bool:
    """Resume a paused queue (idle workers are woken for it); return whether it was paused."""
    changed = gw.scripts.resume_queue(name)
    log.info("queue_resumed", extra={"queue": name, "changed": changed, "by": by})
    return changed


def delete_queue(gw: Gateway, name: str) -> None:
    """Delete an empty queue with its keys; QueueInUse says what keeps one that is not."""
    try:
        kept = queue_removal.delete_queue(gw.directory, name)
    except queue_removal.QueueNotListed:
        raise NotFound("queue not found") from None
    if kept is not None:
        raise QueueInUse(kept)


def _change_limits(
    gw: Gateway, queue: str, edit: Callable[[QueueLimits], QueueLimits], scope: str, by: str
) -> QueueLimits:
    try:
        after = limits.change(gw.scripts, queue, edit)
    except limit_rules.LimitError as exc:
        raise Conflict(str(exc)) from exc
    gw.directory.relist(queue)
    extra = {"queue": queue, "scope": scope, "limits": after.compact_json(), "by": by}
    log.info("limits_changed", extra=extra)
    return after


def set_queue_limits(
    gw: Gateway, queue: str, wanted: QueueLimits, *, replace_types: bool, by: str
) -> QueueLimits:
    """Set a queue's own limits; with `replace_types`, every type's too (else they stay).
    Return the queue's limits after the change."""
    if replace_types:
        return _change_limits(gw, queue, lambda _: wanted, "queue", by)
    return _change_limits(
        gw, queue, lambda current: current.with_scope(None, wanted.queue), "queue", by
    )


def clear_queue_limits(gw: Gateway, queue: str, *, by: str) -> QueueLimits:
    """Remove every limit of a queue; jobs held by one become claimable at once."""
    return _change_limits(gw, queue, lambda _: QueueLimits(), "queue", by)


def set_type_limit(gw: Gateway, queue: str, job_type: str, limit: Limit, *, by: str) -> QueueLimits:
    """Set one job type's limits in a queue (the other types' stay as they are)."""
    return _change_limits(
        gw, queue, lambda current: current.with_scope(job_type, limit), job_type, by
    )


def clear_type_limit(gw: Gateway, queue: str, job_type: str, *, by: str) -> QueueLimits:
    """Remove one job type's limits in a queue."""
    return set_type_limit(gw, queue, job_type, Limit(), by=by)
