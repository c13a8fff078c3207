"""The handler plug-in contract: register a function per job type, look it up by type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class PermanentError(Exception):
    """Raise from a handler to send the job to the DLQ without further attempts."""


@dataclass(frozen=True)
class JobContext:
    """What a handler learns about the job it runs (besides the payload)."""

    id: str
    type: str
    attempt: int
    max_retries: int
    priority: int
    recoveries: int


Handler = Callable[[Any, JobContext], Any]
_handlers: dict[str, Handler] = {}


def handler(job_type: str) -> Callable[[Handler], Handler]:
    """Register the decorated function ``fn(payload, job)`` for `job_type`."""

    def register(fn: Handler) -> Handler:
        existing = _handlers.get(job_type)
        if existing is not None and existing is not fn:
            raise ValueError(f"job type {job_type!r} already has a handler: {existing!r}")
        _handlers[job_type] = fn
        return fn

    return register


def lookup(job_type: str) -> Handler | None:
    """Return the handler for `job_type`, or None if no module registered one."""
    return _handlers.get(job_type)


def registered_types() -> list[str]:
    """Return every registered job type, sorted (what `--check-config` reports)."""
    return sorted(_handlers)
