"""The client's exceptions: one base, one per kind of answer, each with the server's message.

Callers catch what they can act on: ``NotFound`` for an unknown job, ``Conflict`` for a job in
the wrong state, ``Unavailable`` when the gateway could not be reached (after the retries), and
the ``JobError`` family from ``Client.wait``, which carries the job as it was last seen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from taskforge.models import Job


class TaskForgeError(Exception):
    """Anything the client raises on purpose."""


class ApiError(TaskForgeError):
    """The gateway answered with an error: its status, message and JSON body."""

    def __init__(self, status: int, message: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.body = body or {}

    @property
    def fields(self) -> list[dict[str, Any]]:
        """Return the bad fields a 400 names (``field`` and ``message`` each), if any."""
        return list(self.body.get("fields") or self.body.get("errors") or [])


class BadRequest(ApiError):
    """400: the request is malformed; the message says which field and why."""


class Unauthorized(ApiError):
    """401: no token, or the wrong one (``TASKFORGE_API_TOKEN``)."""


class NotFound(ApiError):
    """404: no such job (or host)."""


class Conflict(ApiError):
    """409: the job is in a state the action does not apply to, or a key was reused."""


class Unavailable(TaskForgeError):
    """The gateway could not be reached, or answered 503, on every try.

    ``outcome_unknown`` is true when a request that changes something may have reached the
    gateway (the reply was lost): it may or may not have taken effect. An enqueue never leaves
    that doubt, since each carries an Idempotency-Key and is retried until it is answered.
    """

    def __init__(
        self, message: str, *, outcome_unknown: bool = False, body: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown
        # The last 503's JSON body: ``code`` "not_replicated" (durable mode) names the job
        # (``job_id``, or ``job_ids`` for a batch) that is on the primary but unconfirmed.
        self.body = body or {}


class JobError(TaskForgeError):
    """``Client.wait`` ended without a completed job; ``job`` is the job as last seen."""

    def __init__(self, job: Job, message: str) -> None:
        super().__init__(message)
        self.job = job

    @property
    def state(self) -> str:
        """Return the job's state when the wait ended."""
        return self.job.status


class JobFailed(JobError):
    """The job is dead: every execution failed (``job.last_error`` says the last reason)."""


class JobCanceled(JobError):
    """The job was canceled before it ran."""


class WaitTimeout(JobError):
    """The wait ended before the job finished; ``state`` says where it is."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
}


def api_error(status: int, body: dict[str, Any] | None, fallback: str) -> ApiError:
    """Return the typed exception for an error status, carrying the server's message."""
    message = str((body or {}).get("error") or fallback)
    return _BY_STATUS.get(status, ApiError)(status, message, body)
