"""The handler plug-in contract: register a function per job type, look it up by type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class PermanentError(Exception):
    """Raise from a handler to send the job to the DLQ without further attempts."""


class JobCanceled(BaseException):
    """Raised inside a handler when its job's cancel stops it (the supervisor's SIGTERM).

    A BaseException, as KeyboardInterrupt is: an ``except Exception`` in the handler does not
    swallow it, while ``finally`` blocks and context managers still run as the stack unwinds.
    """


def _never() -> bool:
    return False


@dataclass(frozen=True)
class JobContext:
    """What a handler learns about the job it runs (besides the payload)."""

    id: str
    type: str
    attempt: int
    max_retries: int
    priority: int
    recoveries: int
    # Reads the supervisor's word in shared memory (workerd.slots.Control): no Redis call.
    _cancel_check: Callable[[], bool] = field(default=_never, repr=False, compare=False)

    def cancel_requested(self) -> bool:
        """Tell whether a cancel of this job was requested while it runs (no Redis call).

        Cheap enough to ask in a loop. The request reaches the worker within about a second
        (the supervisor's lease renewal). A handler that asks has said it stops by itself:
        the SIGTERM that follows a request no longer interrupts it (no JobCanceled), but it
        is still killed once WORKER_CANCEL_GRACE is over. Whatever it then does, return or
        raise, the job ends canceled (docs/JOBS.md, "Cancelling a running job").
        """
        return self._cancel_check()


Handler = Callable[[Any, JobContext], Any]
_handlers: dict[str, Handler] = {}


class DuplicateJobType(ValueError):
    """Two handlers registered for one job type: a configuration error, found at import.

    Which one would run depends on import order, so neither is picked. The message names
    both registrations (module and function), so the reader knows which module to change.
    """

    def __init__(self, job_type: str, first: Handler, second: Handler) -> None:
        self.job_type = job_type
        self.first = describe(first)
        self.second = describe(second)
        super().__init__(
            f"job type {job_type!r} is registered twice: by {self.first} and by "
            f"{self.second}; give one of them another type"
        )


def describe(fn: Handler) -> str:
    """Return where a handler is defined, as ``module.function``."""
    module = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{module}.{name}"


def handler(job_type: str) -> Callable[[Handler], Handler]:
    """Register the decorated function ``fn(payload, job)`` for `job_type`.

    Raises DuplicateJobType if another function already has `job_type` (decorating the same
    function twice is harmless and allowed).
    """

    def register(fn: Handler) -> Handler:
        existing = _handlers.get(job_type)
        if existing is not None and existing is not fn:
            raise DuplicateJobType(job_type, existing, fn)
        _handlers[job_type] = fn
        return fn

    return register


def lookup(job_type: str) -> Handler | None:
    """Return the handler for `job_type`, or None if no module registered one."""
    return _handlers.get(job_type)


def registered_types() -> list[str]:
    """Return every registered job type, sorted (what `--check-config` reports)."""
    return sorted(_handlers)
