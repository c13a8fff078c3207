"""A created job's reply, built straight from its request (gateway.service.created_reply), is
the reply Job.to_json gives the same job: the same fields, values and order."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.service import created_job, created_reply
from shared.engine.engine_types import EnqueueResult
from shared.model.jobs import JobState, validate_enqueue

CREATED_AT_MS = 1_780_000_000_123


@pytest.mark.parametrize(
    "body",
    [
        {"type": "t"},
        {"type": "t", "payload": {"to": "ada@example.com", "n": 1, "x": [1.5, -0.0, None]}},
        {"type": "t", "payload": {"ünï": "çødé ✓", "big": 10**30}, "queue": "mail"},
        {"type": "t", "priority": 7, "max_retries": 9, "timeout": "1m"},
        {"type": "t", "timeout": 2.5},
        {"type": "t", "delay": "2s"},
        {"type": "t", "scheduled_at": "2030-01-02T03:04:05.678Z"},
        {"type": "t", "id": None},
    ],
)
@pytest.mark.parametrize("status", [JobState.PENDING, JobState.SCHEDULED])
def test_the_reply_of_a_created_job_is_its_to_json(body: dict[str, Any], status: JobState) -> None:
    request = validate_enqueue(body)
    result = EnqueueResult("3b1f0c2e-9d4a-4c1e-8f2a-6b7c8d9e0f1a", status, True, CREATED_AT_MS)

    expected = created_job(request, result).to_json()

    assert list(created_reply(request, result).items()) == list(expected.items())
