"""Seeding helpers shared by the gateway tests: jobs in a given state, through the engine."""

from __future__ import annotations

from typing import Any

from shared.engine.scripts import Scripts
from shared.model.job_ids import new_job_id
from shared.model.jobs import JobState, validate_enqueue

VALID = {"type": "email.send", "payload": {"to": "a@example.com"}}


def enqueue(scripts: Scripts, **fields: Any) -> str:
    """Create a pending job through the engine, its queue listed as the gateway lists it;
    return its id."""
    request = validate_enqueue({"type": "seed", **fields})
    result = scripts.enqueue(request, new_job_id(request.queue))
    if result.first_in_queue:
        scripts.register_queue(request.queue)
    return result.job_id


def processing(scripts: Scripts) -> str:
    """Create a job and claim it; return its id."""
    job_id = enqueue(scripts, priority=2**31)
    job = scripts.claim(f"worker-{job_id}")
    assert job is not None and job.id == job_id
    return job_id


def dead(scripts: Scripts, *, now_ms: int | None = None) -> str:
    """Create a job that failed its only execution; return its id."""
    # The highest priority, so the claim takes this job whatever else is pending.
    job_id = enqueue(scripts, max_retries=1, priority=2**31)
    job = scripts.claim(f"worker-{job_id}", now_ms=now_ms)
    assert job is not None and job.id == job_id
    scripts.fail(job_id, job.token, "boom", now_ms=now_ms)
    return job_id


def completed(scripts: Scripts) -> str:
    """Create a job and complete it; return its id."""
    job_id = enqueue(scripts, priority=2**31)
    job = scripts.claim(f"worker-{job_id}")
    assert job is not None and job.id == job_id
    scripts.complete(job_id, job.token, "42")
    return job_id


def count_jobs(scripts: Scripts) -> int:
    """Return how many jobs Redis holds in any state."""
    return sum(scripts.redis.zcard(scripts.keys.state_index(s)) for s in JobState)
