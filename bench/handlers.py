"""Handlers the benchmarks load into workerd (TASKFORGE_HANDLERS=workerd.demo,bench.handlers)."""

from __future__ import annotations

import time
from typing import Any

from workerd import JobContext, handler


@handler("stamp")
def stamp(payload: Any, job: JobContext) -> dict[str, float]:
    """Return the wall-clock time the handler started (enqueue-to-start latency)."""
    return {"started": time.time()}


@handler("soak")
def soak(payload: Any, job: JobContext) -> dict[str, bool]:
    """Return at once with a small JSON result, as the demo send_email does (bench.soak)."""
    return {"delivered": True}
