"""A job type only some workerd hosts run (the routing tests): it names the host that ran it.

The result carries the worker's parent pid, its supervisor's: the test tells hosts apart by it.
"""

from __future__ import annotations

import os
import time
from typing import Any

from workerd import JobContext, handler

ROUTED = "routed"


@handler(ROUTED)
def routed(payload: dict[str, Any], job: JobContext) -> dict[str, int]:
    """Sleep payload["sleep"] seconds (default none); return the supervisor's pid."""
    time.sleep(float(payload.get("sleep", 0)))
    return {"supervisor": os.getppid()}
