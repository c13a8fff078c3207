"""Acknowledging a job the worker ran: its outcome written to Redis (complete, fail or
cancel_running), retried through an outage, and how it ended recorded (shared.engine.lifecycle).

The job ran; its outcome must reach Redis, so a write that raised is tried again after the
backoff, for as long as the supervisor (which keeps the job's lease meanwhile) lives.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import redis

from shared.engine import lifecycle
from shared.engine.engine_types import AckResult, BatchAck, Code, Confirmation
from shared.engine.history import Actor
from shared.engine.scripts import Scripts, new_request_id
from shared.model.jobs import Job, format_ms
from shared.obs import metrics, tracing
from workerd.backoff import Backoff
from workerd.execution import Outcome
from workerd.routing import Routing

T = TypeVar("T")

# A batched completion: the job, its result JSON, the fields its log line carries.
Completion = tuple[Job, str, dict[str, object]]


class Acknowledger:
    """Writes one worker's outcomes to Redis and records how each ended."""

    def __init__(
        self,
        scripts: Scripts,
        routing: Routing,
        backoff: Backoff,
        *,
        parent_alive: Callable[[], bool],
        beat_if_idle: Callable[[], None] = lambda: None,
    ) -> None:
        self.scripts = scripts
        self.routing = routing  # the types a complete's claim of the next job takes
        self.backoff = backoff
        self.parent_alive = parent_alive
        # A write between jobs (a held job handed back, a late read) that waits out an outage
        # beats as the step would: with job threads, a sibling's beat would otherwise make
        # this thread look stuck (duties.watchdog).
        self.beat_if_idle = beat_if_idle

    def write(
        self,
        job: Job,
        outcome: Outcome,
        fields: dict[str, object],
        claim_next: str | None,
        holding: str = "",
    ) -> AckResult | None:
        """Write `outcome`; return the complete's answer (None for a failure or a cancel, or
        when the supervisor is gone). `claim_next`: the worker id to claim the next job for;
        `holding`: the job the worker has in hand meanwhile (workerd.prefetch), never the
        answer to a repeat.
        """

        # A try whose reply was lost completed the job and may have claimed the next: the retry
        # is answered as that try was (complete.lua knows it by the token), so no request id.
        def attempt() -> AckResult | None:
            if outcome.ok:
                ack = self.scripts.complete(
                    job.id,
                    job.token,
                    outcome.result_json,
                    claim_next_for=claim_next,
                    queue=job.queue,
                    runnable=self.routing.runnable(job.queue),
                    holding=holding,
                )
                self.log_completion(job, ack, fields)
                return ack
            if outcome.canceled:
                self._cancel(job, outcome, fields)
            else:
                self._fail(job, outcome, fields)
            return None

        return self._until_written(attempt)

    def write_batch(
        self,
        worker_id: str,
        done: Sequence[Completion],
        *,
        count: int,
        queue: str,
        runnable: frozenset[str] | None,
    ) -> BatchAck | None:
        """Complete `done`, (job, result JSON, log fields) each, all of `queue`, and claim up to
        `count` next jobs (WORKER_BATCH, workerd.batching); the caller records how each ended
        (record_batch), once it knows them written. None when the supervisor is gone (the
        jobs' leases then lapse, or release_worker.lua gives them back)."""
        completions = [(job.id, job.token, result) for job, result, _ in done]
        # One request id for every try: complete_batch.lua answers a repeat as its first call.
        request_id = new_request_id()
        return self._until_written(
            lambda: self.scripts.complete_batch(
                worker_id,
                completions,
                count=count,
                queue=queue,
                runnable=runnable,
                request_id=request_id,
            )
        )

    def record_batch(self, done: Sequence[Completion], ack: BatchAck, sent_ms: int) -> None:
        """Record how each completion write_batch wrote ended, each in its job's acknowledge
        span from `sent_ms`, when the call was sent."""
        for (job, _, fields), result in zip(done, ack.acks, strict=True):
            with acknowledge_span(job, span_attributes(job), sent_ms):
                self.log_completion(job, result, fields)

    def _until_written(self, attempt: Callable[[], T]) -> T | None:
        """Return `attempt()`, tried again after the backoff while Redis fails, as long as the
        supervisor lives (None once it is gone)."""
        while True:
            try:
                return attempt()
            except redis.RedisError as exc:
                # The job ran; its outcome must reach Redis. The supervisor keeps its lease.
                self.backoff.wait(exc)
                if not self.parent_alive():
                    return None
                self.beat_if_idle()

    def log_completion(self, job: Job, ack: AckResult, fields: dict[str, object]) -> None:
        """Record how a completion ended (also for one sent ahead and read later: workerd.prefetch)."""
        # Inside the acknowledge span, which gets the outcome.
        confirmation = ack.confirmation  # durable mode: counted only once replicas have it
        if ack.code is Code.DONE:
            fate, more = lifecycle.Outcome.COMPLETED, {}
            confirmed = confirmation is None or confirmation.confirmed
            if fields.get("cancel_requested") and confirmed:
                metrics.count_running_cancel("completed", job.queue)
        else:
            fate, more = lifecycle.Outcome.STALE_ACK, {"result": ack.code.name.lower()}
        _record_end(fate, job, confirmation, **fields, **more)

    def _cancel(self, job: Job, outcome: Outcome, fields: dict[str, object]) -> None:
        """End the job canceled: its handler stopped for the request (cancel_running.lua)."""
        result = self.scripts.cancel_running(
            job.id, job.token, outcome.canceled, queue=job.queue, actor=Actor.WORKER
        )
        if result.code is Code.DONE:
            fate, more = lifecycle.Outcome.CANCELED_RUNNING, {"stopped": outcome.canceled}
        else:
            # Completed, recovered or claimed anew first: not this worker's any more.
            fate, more = lifecycle.Outcome.STALE_ACK, {"result": result.code.name.lower()}
        _record_end(fate, job, result.confirmation, **fields, **more)

    def _fail(self, job: Job, outcome: Outcome, fields: dict[str, object]) -> None:
        result = self.scripts.fail(
            job.id,
            job.token,
            outcome.error,
            permanent=outcome.permanent,
            traceback=outcome.traceback,
            queue=job.queue,
        )
        extra = {**fields, "error": outcome.error_kind}
        spans = {"taskforge.recoveries": job.recoveries}
        # Inside the acknowledge span: it gets the outcome, and the point spans are its children.
        if result.code is Code.RETRYING:
            # RFC 3339 UTC, as in the job's JSON: one time format on every surface.
            retry_at = format_ms(result.next_retry_at)
            spans["taskforge.next_retry_at"] = retry_at
            fate, extra["next_retry_at"] = lifecycle.Outcome.RETRYING, retry_at
        elif result.code is Code.DEAD:
            fate = lifecycle.Outcome.DEAD
        elif result.code is Code.CANCELED:
            # Asked to stop before this worker learned of it: canceled, not retried.
            fate, extra["stopped"] = lifecycle.Outcome.CANCELED_RUNNING, "failed"
        else:
            fate, extra["result"] = lifecycle.Outcome.STALE_FAILURE, result.code.name.lower()
        _record_end(fate, job, result.confirmation, attributes=spans, **extra)


def _record_end(
    fate: lifecycle.Outcome, job: Job, confirmation: Confirmation | None, **fields: Any
) -> None:
    """Record how this worker's acknowledgement of `job` ended (complete, cancel or fail).

    `confirmation`: what durable mode's WAIT answered after that write (None when off); one
    that fell short leaves the outcome uncounted (shared.engine.lifecycle.record).
    """
    lifecycle.record(
        fate,
        job.id,
        job.type,
        queue=job.queue,
        attempt=job.attempts,
        confirmation=confirmation,
        **fields,
    )


def span_attributes(job: Job) -> dict[str, object] | None:
    """The attributes of `job`'s worker spans; None when tracing is off (no span carries them)."""
    if not tracing.enabled():
        return None
    more = {"taskforge.attempt": job.attempts, "taskforge.recoveries": job.recoveries}
    return tracing.job_attributes(job.id, job.type, queue=job.queue, **more)


def acknowledge_span(
    job: Job, attributes: dict[str, object] | None, start_ms: int | None = None
) -> AbstractContextManager[Any]:
    """The task.acknowledge span in which `job`'s outcome is written and recorded (its outcome
    set by the record), child of the job's enqueue; nothing when tracing is off (`attributes`
    None). `start_ms`: when the write was sent, for one read later (a held job's completion,
    a batch's)."""
    if attributes is None:
        return contextlib.nullcontext()
    return tracing.span(
        "task.acknowledge", job.extra.get("traceparent"), attributes, start_ms=start_ms
    )
