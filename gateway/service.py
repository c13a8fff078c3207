"""Engine calls the views compose: enqueue with read-back, lifecycle logs and counters."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gateway.context import Gateway
from gateway.http_errors import not_replicated
from shared.engine.engine_types import EnqueueResult, JobIdConflict
from shared.engine.lifecycle import Outcome, record, record_batch
from shared.engine.queries import get_job, get_jobs
from shared.model.job_ids import new_job_id, new_job_ids
from shared.model.jobs import EnqueueRequest, Job, format_ms
from shared.obs import tracing

tracing.configure(tracing.PRODUCER)


def created_job(request: EnqueueRequest, result: EnqueueResult) -> Job:
    """Return a job just created as the enqueue script stored it, without reading it back.

    The answer is the job as created even if a worker has claimed it since. A delay's
    scheduled_at is counted from created_at, Redis's clock, as the script counted it.
    """
    return Job(
        id=result.job_id,
        type=request.type,
        status=result.status,
        priority=request.priority,
        max_retries=request.max_retries,
        attempts=0,
        recoveries=0,
        payload_json=request.payload_json,
        created_at=result.created_at_ms,
        updated_at=result.created_at_ms,
        scheduled_at=request.scheduled_at_for(result.created_at_ms),
        timeout=request.timeout,
        queue=request.queue,
    )


def created_reply(request: EnqueueRequest, result: EnqueueResult) -> dict[str, Any]:
    """Return ``created_job(request, result).to_json()``, without building the Job first.

    A job just created has one timestamp and no start, end, error, result or cancel: the
    reply is its request's fields in Job.to_json's order (tests/gateway/test_created_reply.py
    holds the two equal), at a third of the CPU (bench/PER_JOB_COST.md).
    """
    created_at = format_ms(result.created_at_ms)
    doc: dict[str, Any] = {
        "id": result.job_id,
        "type": request.type,
        "queue": request.queue,
        "status": str(result.status),
        "priority": request.priority,
        "max_retries": request.max_retries,
        "attempts": 0,
        "recoveries": 0,
        "payload": json.loads(request.payload_json),
        "created_at": created_at,
        "updated_at": created_at,
        "traceback": None,
    }
    scheduled_at = request.scheduled_at_for(result.created_at_ms)
    if scheduled_at is not None:
        doc["scheduled_at"] = format_ms(scheduled_at)
    if request.timeout is not None:
        doc["timeout"] = request.timeout
    return doc


def enqueue_one(
    gw: Gateway, request: EnqueueRequest, idempotency_key: str | None, client_trace: str | None
) -> tuple[dict[str, Any], bool]:
    """Create one job (or find the one its idempotency key or client id names); return its
    JSON, created."""
    # Either way the id names its queue (shared.model.job_ids).
    job_id = request.id or new_job_id(request.queue)
    gw.directory.ensure(request.queue)
    if request.id is not None:
        refuse_taken([request], gw)
    # The client's traceparent is only a parent: the job stores our enqueue span's own.
    # Tracing off (the default): no span would carry the attributes, so none are built.
    attributes = (
        tracing.job_attributes(job_id, request.type, queue=request.queue)
        if tracing.enabled()
        else None
    )
    with tracing.span("task.enqueue", client_trace, attributes):
        result = gw.scripts.enqueue(
            request,
            job_id,
            idempotency_key=idempotency_key,
            traceparent=tracing.current_traceparent(),
        )
        gw.directory.enqueued([(request.queue, result)])
        # Inside the span: it gets the outcome, and the line carries its trace ids.
        queue = request.queue  # a duplicate's too: the key's digest covers the queue
        if result.created:
            record(
                Outcome.ENQUEUED,
                result.job_id,
                request.type,
                queue=queue,
                confirmation=result.confirmation,
            )
        else:
            duplicate_of = {"taskforge.duplicate_of": result.job_id}
            record(
                Outcome.DUPLICATE,
                result.job_id,
                request.type,
                queue=queue,
                attributes=duplicate_of,
                confirmation=result.confirmation,
            )
    if result.confirmation is not None and not result.confirmation.confirmed:
        raise not_replicated(
            result.confirmation,
            [result.job_id],
            keyed=idempotency_key is not None,
            named=request.id is not None,
        )
    if not result.created:
        # The key named an earlier job (same body): answer with that job as it is now, or as
        # created if it was deleted since the script answered (its status is the script's).
        # Same body, so same queue: the digest covers it.
        found = get_job(gw.redis, gw.keys, result.job_id, [request.queue])
        job = found or created_job(request, result)
        return job.to_json(), False
    return created_reply(request, result), True


def enqueue_batch(
    gw: Gateway,
    requests: Sequence[EnqueueRequest],
    idempotency_key: str | None,
    client_trace: str | None,
) -> tuple[list[dict[str, Any]], bool]:
    """Create every job of a batch, all or none (or find those its idempotency key names);
    return their JSON in order, and whether this request created them."""
    made = iter(new_job_ids([request.queue for request in requests]))
    ids = [request.id or next(made) for request in requests]
    queues = list(dict.fromkeys(request.queue for request in requests))
    for queue in queues:
        gw.directory.ensure(queue)
    refuse_taken([request for request in requests if request.id is not None], gw)
    # One span for the batch: its jobs share one trace parent.
    attributes: dict[str, object] = {
        "taskforge.batch_size": len(ids),
        "messaging.batch.message_count": len(ids),
    }
    if len(queues) == 1:  # the batch's one destination; a batch across queues names none
        attributes[tracing.QUEUE] = queues[0]
    with tracing.span("task.enqueue", client_trace, attributes):
        results = gw.scripts.enqueue_many(
            list(zip(requests, ids, strict=True)),
            idempotency_key=idempotency_key,
            traceparent=tracing.current_traceparent(),
        )
        gw.directory.enqueued(zip((r.queue for r in requests), results, strict=True))
        created = all(result.created for result in results)  # a repeat's are all not created
        # One line per queue of the batch, inside the span (its outcome, its trace ids).
        by_queue: dict[str, list[tuple[str, str]]] = {}
        for request, result in zip(requests, results, strict=True):
            by_queue.setdefault(request.queue, []).append((result.job_id, request.type))
        outcome = Outcome.ENQUEUED if created else Outcome.DUPLICATE
        confirmation = results[0].confirmation  # one WAIT after the whole batch
        for queue, jobs in by_queue.items():
            record_batch(outcome, jobs, queue=queue, confirmation=confirmation)
    if confirmation is not None and not confirmation.confirmed:
        raise not_replicated(
            confirmation,
            [result.job_id for result in results],
            keyed=idempotency_key is not None,
            named=all(request.id is not None for request in requests),
        )
    if created:
        return [created_reply(q, r) for q, r in zip(requests, results, strict=True)], True
    return jobs_now(gw, requests, results), False


def refuse_taken(requests: Sequence[EnqueueRequest], gw: Gateway) -> None:
    """Raise JobIdConflict when a client's id is a job's in another queue (one whose name has
    the same tag: shared.engine.job_locator), so an id names one job across queues."""
    for request in requests:
        assert request.id is not None
        if gw.directory.locator.held_elsewhere(request.id, request.queue) is not None:
            raise JobIdConflict(request.id)


def jobs_now(
    gw: Gateway, requests: Sequence[EnqueueRequest], results: Sequence[EnqueueResult]
) -> list[dict[str, Any]]:
    """Return the JSON of jobs an idempotency key named, as they are now (one round trip).

    Same batch, so each job is in its request's queue (the digest covers it). A job deleted
    since the script answered (retention, a purge) is shown as created, with its status.
    """
    located = [(r.job_id, q.queue) for q, r in zip(requests, results, strict=True)]
    found = get_jobs(gw.redis, gw.keys, located)
    return [
        (job or created_job(request, result)).to_json()
        for request, result, job in zip(requests, results, found, strict=True)
    ]
