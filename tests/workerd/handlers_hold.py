"""A job type that runs until the test releases it: what GET /workers shows while a job runs."""

from __future__ import annotations

import os
import time
from typing import Any

from workerd import JobContext, handler

POLL = 0.02  # seconds between looks for the release file


@handler("hold")
def hold(payload: dict[str, Any], job: JobContext) -> dict[str, bool]:
    """Run until the file payload["release"] exists, at most payload["max_seconds"] (a bound:
    a test that fails before releasing must not leave the job running)."""
    deadline = time.monotonic() + float(payload.get("max_seconds", 30))
    while not os.path.exists(payload["release"]):
        if time.monotonic() > deadline:
            raise TimeoutError("never released")
        time.sleep(POLL)
    return {"released": True}
