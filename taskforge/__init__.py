"""TaskForge's Python client: enqueue jobs and look at them through the gateway's HTTP API.

from taskforge import Client

client = Client("http://127.0.0.1:8080")          # or TASKFORGE_URL / TASKFORGE_API_TOKEN
job = client.enqueue("send_email", {"to": "a@example.com"}, delay="5m")
done = client.wait(job.id, timeout=60)            # the completed job, or JobFailed, ...
"""

from __future__ import annotations

from taskforge.client import Client, JobSpec, new_job_id
from taskforge.errors import (
    ApiError,
    BadRequest,
    Conflict,
    JobCanceled,
    JobError,
    JobFailed,
    NotFound,
    TaskForgeError,
    Unauthorized,
    Unavailable,
    WaitTimeout,
)
from taskforge.models import (
    BulkResult,
    History,
    HistoryEntry,
    Host,
    Job,
    JobPage,
    Limits,
    Queue,
    Schedule,
    ScopeLimit,
    Stats,
)
from taskforge.version import __version__

__all__ = [
    "ApiError",
    "BadRequest",
    "BulkResult",
    "Client",
    "Conflict",
    "History",
    "HistoryEntry",
    "Host",
    "Job",
    "JobCanceled",
    "JobError",
    "JobFailed",
    "JobPage",
    "JobSpec",
    "Limits",
    "NotFound",
    "Queue",
    "Schedule",
    "ScopeLimit",
    "Stats",
    "TaskForgeError",
    "Unauthorized",
    "Unavailable",
    "WaitTimeout",
    "__version__",
    "new_job_id",
]
