"""A job whose outcome never reaches Redis, under a one-second limit on that write.

workerd imports this module (TASKFORGE_HANDLERS) in every process that runs jobs, so each
gives a finished job's outcome write 1 s (or the job's own timeout, if longer) instead of
workerd.worker's ten minutes. The ``unwritable`` job's first run then makes every completion
its process sends fail, as a Redis error that never clears would: the write never lands while
the supervisor (another process) renews the job's lease.
"""

from __future__ import annotations

from typing import Any, NoReturn

import redis

from shared.engine.scripts.job_scripts import JobCalls
from tests.workerd.write_limit import WRITE_LIMIT
from workerd import JobContext, handler
from workerd import worker as worker_module

worker_module.OUTCOME_WRITE_LIMIT = WRITE_LIMIT


def _refused(*_args: Any, **_kwargs: Any) -> NoReturn:
    raise redis.ConnectionError("injected: this process's completions never reach Redis")


@handler("unwritable")
def unwritable(payload: dict[str, Any], job: JobContext) -> dict[str, int]:
    """Succeed; on the first attempt, leave this process unable to write any completion."""
    if job.attempt == 1:
        JobCalls.complete = _refused  # type: ignore[method-assign]
        JobCalls.complete_begin = _refused  # type: ignore[method-assign]
    return {"attempt": job.attempt}
