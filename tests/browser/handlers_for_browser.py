"""Job types the browser tests run under a real workerd: one that succeeds, one held dead.

``browser_gated`` fails for good while the file ``payload["marker"]`` exists, so its job goes
to the DLQ; once the test removes the file, a replay of that job completes. The dashboard's
replay is then seen to work end to end, not just to move the job back to pending.
"""

from __future__ import annotations

import os
from typing import Any

from workerd import JobContext, PermanentError, handler


@handler("browser_ok")
def browser_ok(payload: dict[str, Any], job: JobContext) -> dict[str, Any]:
    """Succeed at once with a small result the job page shows."""
    return {"ok": True, "attempt": job.attempt}


@handler("browser_gated")
def browser_gated(payload: dict[str, Any], job: JobContext) -> dict[str, Any]:
    """Fail permanently while the marker file exists; succeed once it is gone."""
    if os.path.exists(payload["marker"]):
        raise PermanentError("the marker file is still there")
    return {"released": True}
