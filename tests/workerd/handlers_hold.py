"""A job type that runs until the test releases it: what GET /workers shows while a job runs."""

from __future__ import annotations

from typing import Any

from tests.workerd.release_file import wait_for_release
from workerd import JobContext, handler


@handler("hold")
def hold(payload: dict[str, Any], job: JobContext) -> dict[str, bool]:
    """Run until the file payload["release"] exists, at most payload["max_seconds"] (a bound:
    a test that fails before releasing must not leave the job running)."""
    wait_for_release(payload["release"], float(payload.get("max_seconds", 30)))
    return {"released": True}
