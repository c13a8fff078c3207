"""Finish jobs through the engine (as a worker would) for tests that watch them through the
gateway."""

from __future__ import annotations

import uuid
from typing import Any

from shared.engine.engine_types import Code, NotRunnable
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts

WORKER = "w-test"


def fresh_queue(name: str = "q") -> str:
    """Return a queue name no earlier test used (the session's gateway outlives each FLUSHALL)."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


def engine_on(redis_client: Any) -> Scripts:
    """Return the engine's scripts on the private Redis."""
    return Scripts(redis_client, Keys())


def claim(scripts: Scripts, queue: str, job_id: str) -> int:
    """Claim `job_id` (it must be the best pending job of `queue`); return its fencing token."""
    job = scripts.claim(WORKER, queue=queue)
    assert job is not None and not isinstance(job, NotRunnable), f"nothing to claim in {queue}"
    assert job.id == job_id, f"claimed {job.id}, expected {job_id}"
    return job.token


def complete(scripts: Scripts, queue: str, job_id: str, result_json: str = "42") -> None:
    """Run `job_id` to completion with this result."""
    token = claim(scripts, queue, job_id)
    assert scripts.complete(job_id, token, result_json, queue=queue).code is Code.DONE


def kill(scripts: Scripts, queue: str, job_id: str, error: str = "E: boom") -> None:
    """Fail `job_id` for good (permanent: dead whatever its retries)."""
    token = claim(scripts, queue, job_id)
    result = scripts.fail(job_id, token, error, permanent=True, queue=queue)
    assert result.code is Code.DEAD, result
