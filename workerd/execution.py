"""Running one job's handler: every exception turned into a recorded failure, never a crash,
and a cancel requested meanwhile turned into a canceled end (docs/JOBS.md).

The worker's SIGTERM handler raises JobCanceled inside the handler while an Execution is armed
(workerd.worker); everything else about the run is here, free of Redis.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass

from shared.model.jobs import Job, dump_json
from shared.obs.log import error_line, error_text
from workerd.handler_registry import JobCanceled, JobContext, PermanentError, lookup
from workerd.slots import Control


@dataclass(frozen=True)
class Outcome:
    """How one execution ended, before it is recorded in Redis."""

    ok: bool
    result_json: str = "null"
    # The message and traceback go to Redis (last_error and traceback, the job owner's own
    # data); logs get only the kind, because a handler's message can echo its payload.
    error: str = ""  # "Kind: message", the one format of last_error
    error_kind: str = ""
    permanent: bool = False
    traceback: str = ""
    # Stopped for its cancel: how ("sigterm": interrupted; "handler": it returned or raised
    # after the request), and the job ends canceled. "" when no cancel stopped it.
    canceled: str = ""


@dataclass
class Execution:
    """One run of a handler, as its cancel sees it: named by its start (Slot.start_job)."""

    started: float
    control: Control | None = None
    armed: bool = False  # inside the handler: a cancel's SIGTERM may raise JobCanceled there
    asked: bool = False  # the handler asked cancel_requested(): it stops by itself

    def requested(self) -> bool:
        """Tell whether the supervisor asked this execution to stop (shared memory)."""
        return self.control is not None and self.control.cancel_requested(self.started)

    def ask(self) -> bool:
        """The handler's job.cancel_requested(): from now on it is trusted to stop by itself."""
        self.asked = True
        return self.requested()


def run_handler(job: Job, result_max_bytes: int, execution: Execution | None = None) -> Outcome:
    """Call the job's handler; turn every exception into a recorded failure, never a crash.

    With an `execution`, a cancel requested while it runs ends it canceled: interrupted
    (JobCanceled, raised by the worker's SIGTERM handler while armed), or the handler raised
    after the request, or it returned after asking job.cancel_requested() and seeing it. A
    handler that returns without having asked completes: its work is done (and the
    completion wins if it reaches Redis before any cancel does).
    """
    handler = lookup(job.type)
    if handler is None:
        return _refused("NoHandler", f"no handler for job type {job.type!r}")
    context = JobContext(
        id=job.id,
        type=job.type,
        attempt=job.attempts,
        max_retries=job.max_retries,
        priority=job.priority,
        recoveries=job.recoveries,
        _cancel_check=execution.ask if execution is not None else _not_asked,
    )
    try:
        try:
            if execution is not None:
                execution.armed = True
            result = handler(job.payload, context)
        finally:
            if execution is not None:
                execution.armed = False
    except JobCanceled:
        return Outcome(False, canceled="sigterm")
    except Exception as exc:  # the handler boundary: any failure is the job's, not ours
        if execution is not None and execution.requested():
            return Outcome(False, canceled="handler")
        return Outcome(
            False,
            error=error_text(exc),
            error_kind=type(exc).__name__,
            permanent=isinstance(exc, PermanentError),
            traceback=handler_traceback(exc),
        )
    if execution is not None and execution.asked and execution.requested():
        return Outcome(False, canceled="handler")
    try:
        result_json = dump_json(result)
    except (TypeError, ValueError) as exc:
        return _refused(
            "ResultNotSerialisable", f"result is not JSON-serialisable ({error_text(exc)})"
        )
    size = len(result_json.encode())
    if size > result_max_bytes:
        return _refused(
            "ResultTooLarge", f"result is {size} bytes, over the {result_max_bytes} cap"
        )
    return Outcome(ok=True, result_json=result_json)


def _not_asked() -> bool:
    return False


def _refused(kind: str, message: str) -> Outcome:
    """Return a failure the worker itself decided, worded as error_text words an exception."""
    return Outcome(False, error=error_line(kind, message), error_kind=kind)


def handler_traceback(exc: BaseException) -> str:
    """Return the traceback of an exception a handler raised, from the handler's frame down."""
    # The first frame is run_handler's own call of the handler: not the job owner's code.
    tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
    return "".join(traceback.format_exception(type(exc), exc, tb))
