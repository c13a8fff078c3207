"""Finish jobs through the engine (as a worker would) for tests that watch them through the
gateway, and probes for gateway features being merged while the client and CLI are written."""

from __future__ import annotations

import uuid
from typing import Any

from shared.engine_types import Code, NotRunnable
from shared.keys import Keys
from shared.scripts import Scripts
from tests.support.gunicorn import Gunicorn

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


# --- features on their way (i16-wait, i16-delay); drop these probes once both are merged ---


def wait_missing(gw: Gunicorn) -> bool:
    """Tell whether this gateway still refuses ``GET /jobs/<id>?wait=`` as unknown."""
    status, _, doc = gw.request("GET", f"/jobs/{uuid.uuid4()}?wait=0")
    fields = doc.get("fields", []) if isinstance(doc, dict) else []
    return status == 400 and {"field": "wait", "message": "unknown query parameter"} in fields


def delay_missing(gw: Gunicorn) -> bool:
    """Tell whether this gateway still refuses ``"delay"`` in an enqueue body as unknown."""
    # An invalid batch (its payload is not an object): nothing is enqueued either way.
    body = {"jobs": [{"type": "probe", "delay": 1, "payload": "not an object"}]}
    status, _, doc = gw.request("POST", "/enqueue/batch", body)
    errors = doc.get("errors", []) if isinstance(doc, dict) else []
    unknown = {"index": 0, "field": "delay", "message": "unknown field"}
    return status == 400 and unknown in errors


WAIT_PENDING = "GET /jobs/<id>?wait= is not merged yet (branch i16-wait): this test runs once it is"
DELAY_PENDING = '"delay" on enqueue is not merged yet (branch i16-delay): this test runs once it is'
