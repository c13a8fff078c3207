"""A job's run: claim, renew, complete (and claim the next), fail, cancel while running. The
per-job path: each call is one script, one round trip (shared.engine.scripts.upkeep_scripts moves the rest)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import cache
from typing import Any

from shared.engine.engine_types import (
    AckResult,
    BatchAck,
    Code,
    Confirmation,
    FailResult,
    NotRunnable,
    QueuePaused,
)
from shared.engine.history import ACTOR_CODES, Actor
from shared.engine.keys import Keys
from shared.engine.replies import CLAIM_REPLY_FIELDS, claimed_job, text
from shared.engine.scripts import script_base as base
from shared.engine.scripts.script_base import ScriptsBase, now_arg
from shared.engine.scripts.script_transport import Sent
from shared.model.jobs import TYPE_PATTERN, Job, cap_traceback
from shared.model.queues import DEFAULT_QUEUE
from shared.settings.config import WORKER_BATCH_MAX


def _check_batch(*sizes: int) -> None:
    """Refuse a batch above WORKER_BATCH_MAX: one script call blocks Redis for all its jobs."""
    if max(sizes) > WORKER_BATCH_MAX:
        raise ValueError(f"a batch of {max(sizes)} jobs: at most {WORKER_BATCH_MAX} a call")


@cache
def runnable_arg(types: frozenset[str] | None) -> str:
    """Return the claim scripts' runnable-types argument: '|a|b|', or '' for any type.

    A name no job can have (shared.model.jobs.TYPE_PATTERN; '|' among its characters) is left out:
    it could only make the scripts match other types. Cached: a worker passes the same set
    on every claim, and a frozenset keeps its hash.
    """
    if types is None:
        return ""
    return "|" + "".join(f"{t}|" for t in sorted(types) if TYPE_PATTERN.fullmatch(t))


def limit_keys(k: Keys) -> dict[str, str]:
    """Return the limits' keys a claim passes (includes/common.lua, "Concurrency and rate")."""
    return {
        "limits": k.limits,
        "running": k.running,
        "held": k.held,
        "buckets": k.buckets,
        "gates": k.gates,
        "held_order": k.held_order,
    }


class JobCalls(ScriptsBase):
    """The calls of workers and the scheduler on the jobs of a queue."""

    def claim(
        self,
        worker_id: str,
        *,
        queue: str = DEFAULT_QUEUE,
        runnable: frozenset[str] | None = None,
        request_id: str | None = None,
        now_ms: int | None = None,
    ) -> Job | NotRunnable | None:
        """Start the best pending job for this worker, or return None when there is none.

        `runnable`: the job types the worker runs (None: any). When the best job is of another
        type nothing is claimed: the answer is a :class:`NotRunnable` naming its type, and the
        job stays first in line. A caller that retries a claim that raised passes the same
        `request_id` again: if the first call did reach Redis, the retry gets the job it
        claimed instead of a second one. Raises QueuePaused, having claimed nothing, when the
        queue is paused.
        """
        reply = self.transport.run(
            "claim",
            **self._claim_args(queue, worker_id, runnable, request_id, now_ms),
            events_cap=self._events_cap(),
        )
        if reply[0] == Code.PAUSED:
            raise QueuePaused(queue)
        return _claimed(reply, worker_id, queue)

    def claim_begin(
        self,
        worker_id: str,
        *,
        queue: str = DEFAULT_QUEUE,
        runnable: frozenset[str] | None = None,
        request_id: str,
    ) -> PendingClaim:
        """:meth:`claim`, sent now and read later (:meth:`PendingClaim.result`). A reply lost
        to a connection error is recovered by repeating :meth:`claim` with the same
        `request_id`."""
        sent = self.transport.begin(
            "claim",
            **self._claim_args(queue, worker_id, runnable, request_id, None),
            events_cap=self._events_cap(),
        )
        return PendingClaim(sent, worker_id, queue, request_id)

    def claim_behind(
        self,
        command: Sequence[Any],
        worker_id: str,
        *,
        queue: str = DEFAULT_QUEUE,
        runnable: frozenset[str] | None = None,
        request_id: str,
    ) -> tuple[Any, PendingClaim]:
        """:meth:`claim`, sent behind `command` in one write (ScriptTransport.begin_behind):
        return `command`'s reply, read now, and the claim, read next. A reply lost to a
        connection error is recovered by repeating :meth:`claim` with the same `request_id`."""
        first, sent = self.transport.begin_behind(
            command,
            "claim",
            **self._claim_args(queue, worker_id, runnable, request_id, None),
            events_cap=self._events_cap(),
        )
        return first, PendingClaim(sent, worker_id, queue, request_id)

    def claim_batch(
        self,
        worker_id: str,
        count: int,
        *,
        queue: str = DEFAULT_QUEUE,
        runnable: frozenset[str] | None = None,
        request_id: str | None = None,
        now_ms: int | None = None,
    ) -> list[Job] | NotRunnable:
        """Start up to `count` of the best pending jobs for this worker in one call, each with
        its own lease and fencing token, as :meth:`claim` starts one (claim_batch.lua).

        Fewer (or none) when the queue runs out, or when a job's type is not in `runnable` (it
        stays first in line); a batch that stops at such a job before claiming any answers a
        :class:`NotRunnable` naming its type, as :meth:`claim` does. A retry of a call that
        raised passes the same `request_id`: it gets the jobs the first call claimed. Raises
        QueuePaused, having claimed nothing, when the queue is paused. ValueError, sending
        nothing, for a `count` above WORKER_BATCH's maximum (a script's work is bounded).
        """
        _check_batch(count)
        reply = self.transport.run(
            "claim_batch",
            **self._claim_args(queue, worker_id, runnable, request_id, now_ms),
            count=max(1, count),
            events_cap=self._events_cap(),
        )
        if reply[0] == Code.PAUSED:
            raise QueuePaused(queue)
        jobs, refused = _batch_claimed(reply, worker_id, queue)
        return refused if refused is not None and not jobs else list(jobs)

    def complete_batch(
        self,
        worker_id: str,
        completions: Sequence[tuple[str, int, str]],
        *,
        count: int,
        queue: str = DEFAULT_QUEUE,
        runnable: frozenset[str] | None = None,
        request_id: str | None = None,
        now_ms: int | None = None,
    ) -> BatchAck:
        """Complete the jobs this worker ran, (job id, token, result JSON) each, and claim up
        to `count` next jobs (0: none) in one call (complete_batch.lua).

        Each job is answered on its own, as :meth:`complete` answers one. The claim part is
        :meth:`claim_batch`'s. A retry of a call that raised passes the same completions and
        `request_id`: nothing completes twice, and it gets the jobs the first call claimed.
        ValueError, sending nothing, for a `count` or more completions than WORKER_BATCH's
        maximum (a script's work is bounded).
        """
        _check_batch(count, len(completions))
        k = self.q(queue)
        args = self._claim_args(queue, worker_id, runnable, request_id, now_ms)
        # Sent with events off too (untouched then): the job keys follow it.
        args["events"] = self._events_key(k) or k.events
        reply = self.transport.run(
            "complete_batch",
            **args,
            completed=k.completed,
            jobs=[k.job(job_id) for job_id, _, _ in completions],
            count=max(0, count),
            events_cap=self._events_cap() or 0,
            completions=[value for _, token, result in completions for value in (token, result)],
        )
        done = int(reply[0])
        acks = tuple(
            AckResult(Code(reply[1 + 2 * i]), text(reply[2 + 2 * i]) or None) for i in range(done)
        )
        claim = reply[1 + 2 * done :]
        if not claim:
            return BatchAck(acks)
        if claim[0] == Code.PAUSED:
            return BatchAck(acks, paused=True)
        jobs, refused = _batch_claimed(claim, worker_id, queue)
        return BatchAck(acks, jobs, refused)

    def _claim_args(
        self,
        queue: str,
        worker_id: str,
        runnable: frozenset[str] | None,
        request_id: str | None,
        now_ms: int | None,
    ) -> dict[str, Any]:
        """Return the keys and arguments claim.lua, claim_batch.lua and complete_batch.lua
        share, by name."""
        k = self.q(queue)
        return {
            "pending": k.pending,
            "pending_since": k.pending_since,
            "processing": k.processing,
            "claim": k.last_claim(worker_id),
            "wake": k.wake,
            "paused": k.paused,
            **limit_keys(k),
            "events": self._events_key(k),
            "job_prefix": k.job_prefix,
            "worker_id": worker_id,
            "lease_ms": self.policy.lease_ms,
            "request_id": request_id or base.new_request_id(),
            "now_ms": now_arg(now_ms),
            "runnable": runnable_arg(runnable),
            "wake_cap": self.policy.wake_cap,
        }

    def renew(
        self,
        leases: Sequence[tuple[str, int]],
        *,
        queue: str = DEFAULT_QUEUE,
        now_ms: int | None = None,
    ) -> list[Code]:
        """Extend the leases of (job id, token) pairs; one Code per pair (see renew.lua).

        DONE: extended. WRONG_STATE: already finished by its holder (harmless). STALE_TOKEN or
        NOT_FOUND: the lease was lost and the worker running the job must be stopped.
        """
        if not leases:
            return []
        k = self.q(queue)
        reply = self.transport.run(
            "renew",
            processing=k.processing,
            jobs=[k.job(job_id) for job_id, _ in leases],
            lease_ms=self.policy.lease_ms,
            now_ms=now_arg(now_ms),
            tokens=[token for _, token in leases],
        )
        return [Code(code) for code in reply]

    def complete(
        self,
        job_id: str,
        token: int,
        result_json: str = "null",
        *,
        claim_next_for: str | None = None,
        queue: str = DEFAULT_QUEUE,
        runnable: frozenset[str] | None = None,
        now_ms: int | None = None,
        holding: str = "",
    ) -> AckResult:
        """Record success with the job's result (JSON text); optionally claim the next job.

        With `claim_next_for` (a worker id) the worker's next job comes back in
        ``AckResult.next_job`` from the same round trip, as :meth:`claim` would return it (with
        `runnable` as there); a retried call (its reply lost) gets the job the first call
        claimed, found by the token, never the job `holding` names (the one a worker that
        holds its next job has in hand meanwhile: workerd.prefetch). A paused queue claims
        nothing: ``AckResult.paused`` says so (the completion stands).
        """
        worker = claim_next_for or ""
        k = self.q(queue)
        reply, confirmation = self.transport.run_durable(
            "complete",
            k.slot_marker,
            **self._complete_args(
                job_id, token, result_json, worker, queue, runnable, now_ms, holding
            ),
        )
        return _ack_result(reply, confirmation, worker, queue)

    def complete_begin(
        self,
        job_id: str,
        token: int,
        result_json: str = "null",
        *,
        claim_next_for: str | None = None,
        queue: str = DEFAULT_QUEUE,
        runnable: frozenset[str] | None = None,
        holding: str = "",
    ) -> PendingAck:
        """:meth:`complete`, sent now and read later (:meth:`PendingAck.result`): a worker
        holding its next job starts it meanwhile. No WAIT follows it: not for durable mode
        (workerd.worker holds no next job there). On a cluster it runs at once."""
        worker = claim_next_for or ""
        sent = self.transport.begin(
            "complete",
            **self._complete_args(
                job_id, token, result_json, worker, queue, runnable, None, holding
            ),
        )
        return PendingAck(sent, worker, queue)

    def _complete_args(
        self,
        job_id: str,
        token: int,
        result_json: str,
        worker: str,
        queue: str,
        runnable: frozenset[str] | None,
        now_ms: int | None,
        holding: str,
    ) -> dict[str, Any]:
        """Return complete.lua's keys and arguments, by name. `holding` is left out when
        empty (not a byte more per job), and then so may the events cap be (events off)."""
        k, p = self.q(queue), self.policy
        events_cap = self._events_cap()
        if holding and events_cap is None:
            events_cap = 0  # events off, said outright: only trailing values may be left out
        return {
            "job": k.job(job_id),
            "processing": k.processing,
            "completed": k.completed,
            "pending": k.pending,
            "pending_since": k.pending_since,
            "wake": k.wake,
            "paused": k.paused,
            **limit_keys(k),
            "events": self._events_key(k),
            "token": token,
            "result": result_json,
            "now_ms": now_arg(now_ms),
            "job_prefix": k.job_prefix,
            "worker_id": worker,
            "lease_ms": p.lease_ms,
            "runnable": runnable_arg(runnable),
            "wake_cap": p.wake_cap,
            "events_cap": events_cap,
            "holding": holding or None,
        }

    def fail(
        self,
        job_id: str,
        token: int,
        error: str,
        *,
        permanent: bool = False,
        traceback: str = "",
        queue: str = DEFAULT_QUEUE,
        actor: Actor = Actor.WORKER,
        now_ms: int | None = None,
    ) -> FailResult:
        """Record a failed execution: retry after the backoff, or dead when attempts are spent.

        `error` is ``"Type: message"``; `traceback` (a handler's, "" for none) is stored with
        it, cut to shared.model.jobs.TRACEBACK_LIMIT bytes. `actor`: who reports it, for the job's
        history (the supervisor, for a job that timed out).
        """
        k, p = self.q(queue), self.policy
        reply, confirmation = self.transport.run_durable(
            "fail",
            k.slot_marker,
            job=k.job(job_id),
            processing=k.processing,
            retrying=k.retrying,
            dead=k.dead,
            failures=k.failures,
            canceled=k.canceled,
            running=k.running,
            held=k.held,
            pending=k.pending,
            wake=k.wake,
            held_order=k.held_order,
            events=self._events_key(k),
            token=token,
            error=error,
            retry_base_ms=p.retry_base_ms,
            retry_max_ms=p.retry_max_ms,
            retry_jitter=p.retry_jitter,
            draw=random.random(),
            permanent="1" if permanent else "0",
            dead_ttl_ms=p.dlq_max_age_ms,
            now_ms=now_arg(now_ms),
            traceback=cap_traceback(traceback),
            actor=ACTOR_CODES[actor],
            canceled_ttl_ms=self._finished_ttl_ms(),
            wake_cap=p.wake_cap,
            events_cap=self._events_cap(),
        )
        code = Code(reply[0])
        if code is Code.RETRYING:
            return FailResult(
                code,
                next_retry_at=int(reply[3]),
                job_type=text(reply[1]),
                attempt=int(reply[2]),
                confirmation=confirmation,
            )
        if code in (Code.DEAD, Code.CANCELED):
            return FailResult(
                code, job_type=text(reply[1]), attempt=int(reply[2]), confirmation=confirmation
            )
        return FailResult(code, status=text(reply[1]) if len(reply) > 1 else None)

    def cancel_running(
        self,
        job_id: str,
        token: int,
        stopped: str,
        *,
        queue: str = DEFAULT_QUEUE,
        actor: Actor = Actor.WORKER,
        now_ms: int | None = None,
    ) -> AckResult:
        """End a running job canceled once its stop was requested and its worker stopped it.

        `stopped`: how ("handler", "sigterm"), kept in its history. DONE carries the job's
        type; STALE_TOKEN the status that won (completed first, or recovered); WRONG_STATE: no
        cancel was requested.
        """
        k = self.q(queue)
        reply, confirmation = self.transport.run_durable(
            "cancel_running",
            k.slot_marker,
            job=k.job(job_id),
            processing=k.processing,
            canceled=k.canceled,
            running=k.running,
            held=k.held,
            held_order=k.held_order,
            pending=k.pending,
            wake=k.wake,
            events=self._events_key(k),
            token=token,
            stopped=stopped,
            actor=ACTOR_CODES[actor],
            hash_ttl_ms=self._finished_ttl_ms(),
            now_ms=now_arg(now_ms),
            wake_cap=self.policy.wake_cap,
            events_cap=self._events_cap(),
        )
        code = Code(reply[0])
        detail = text(reply[1]) if len(reply) > 1 else None
        if code is Code.DONE:
            return AckResult(code, job_type=detail, confirmation=confirmation)
        return AckResult(code, detail)


class PendingClaim:
    """A claim sent and not yet read (:meth:`JobCalls.claim_begin`)."""

    __slots__ = ("queue", "request_id", "sent", "worker")

    def __init__(self, sent: Sent, worker: str, queue: str, request_id: str) -> None:
        self.sent, self.worker, self.queue, self.request_id = sent, worker, queue, request_id

    def result(self) -> Job | NotRunnable | None:
        """Read the reply and return what :meth:`JobCalls.claim` would have (QueuePaused
        included)."""
        reply = self.sent.reply()
        if reply[0] == Code.PAUSED:
            raise QueuePaused(self.queue)
        return _claimed(reply, self.worker, self.queue)


class PendingAck:
    """A completion sent and not yet read (:meth:`JobCalls.complete_begin`)."""

    __slots__ = ("queue", "sent", "worker")

    def __init__(self, sent: Sent, worker: str, queue: str) -> None:
        self.sent, self.worker, self.queue = sent, worker, queue

    def result(self) -> AckResult:
        """Read the reply (waiting for it if need be) and return what :meth:`JobCalls.complete`
        would have. Raises what the call raised; a RedisError leaves it unknown whether the
        completion landed: repeat it with :meth:`JobCalls.complete` (same token)."""
        return _ack_result(self.sent.reply(), None, self.worker, self.queue)


def _ack_result(
    reply: list[Any], confirmation: Confirmation | None, worker: str, queue: str
) -> AckResult:
    """Return what complete.lua's `reply` says (`worker`: the id it claimed the next job for)."""
    code = Code(reply[0])
    if code is Code.DONE and len(reply) == 2 and reply[1] == Code.PAUSED:
        return AckResult(code, paused=True, confirmation=confirmation)
    if code in (Code.DONE, Code.NOT_RUNNABLE):
        next_job = _claimed(reply, worker, queue)
        return AckResult(Code.DONE, next_job=next_job, confirmation=confirmation)
    return AckResult(code, text(reply[1]) if len(reply) > 1 else None)


def _batch_claimed(
    reply: list[Any], worker_id: str, queue: str
) -> tuple[tuple[Job, ...], NotRunnable | None]:
    """Return the jobs a claim_batch reply (claim_batch.lua's, or complete_batch.lua's claim
    part) holds, and the type it stopped at, if any."""
    if reply[0] == Code.EMPTY:
        return (), None
    width = len(CLAIM_REPLY_FIELDS)
    values = reply[3:]
    jobs = tuple(
        claimed_job(values[i : i + width], worker_id, queue)
        for i in range(0, int(reply[2]) * width, width)
    )
    refused = NotRunnable(queue, text(reply[1]) or "") if reply[0] == Code.NOT_RUNNABLE else None
    return jobs, refused


def _claimed(reply: list[Any], worker_id: str, queue: str) -> Job | NotRunnable | None:
    """Return what a claim reply (claim.lua's, or complete.lua's claim part) holds."""
    if reply[0] == Code.NOT_RUNNABLE:
        return NotRunnable(queue, text(reply[1]) or "")
    if reply[0] == Code.DONE and len(reply) > 1:
        return claimed_job(reply[1:], worker_id, queue)
    return None
