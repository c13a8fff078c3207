"""What an operator action refuses with: one hierarchy, mapped once per surface.

The message is the API's wording (its JSON "error"), `facts` the fields its body carries
beside it; the dashboard words each refusal its own way from the same facts.
"""

from __future__ import annotations

from typing import Any

from shared.read.queue_removal import QueueKept


class ActionError(Exception):
    """An action refused: why, and the facts behind it."""

    def __init__(self, message: str, /, **facts: Any) -> None:
        super().__init__(message)
        self.message = message
        self.facts = facts


class NotFound(ActionError):
    """What the action names does not exist (a job, queue, host or schedule)."""


class InvalidInput(ActionError):
    """An input the parsers let through that the action still cannot use (a stale cursor)."""


class Conflict(ActionError):
    """The thing exists but its state refuses the action."""


class WrongJobState(Conflict):
    """The job is not in a state this action applies to; `status` is the one it is in."""

    def __init__(self, message: str, status: str) -> None:
        super().__init__(message, status=status)
        self.status = status


class QueueInUse(Conflict):
    """A queue delete refused: `kept` says what keeps the queue."""

    def __init__(self, kept: QueueKept) -> None:
        super().__init__(
            f"queue kept: {kept.reason()}",
            jobs=kept.jobs,
            paused=kept.paused,
            limited=kept.limited,
            served_by=list(kept.served_by),
        )
        self.kept = kept
