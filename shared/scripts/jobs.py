"""A job's run: claim, renew, complete, fail, and the upkeep that moves jobs between states
(promote, recover, release, trim). The per-job path: each call is one script, one round trip."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from functools import cache
from typing import Any

from shared.engine_types import (
    AckResult,
    Code,
    FailResult,
    NotRunnable,
    PromoteResult,
    QueuePaused,
    RecoverResult,
    Released,
    TrimResult,
)
from shared.history import ACTOR_CODES, Actor
from shared.jobs import TYPE_PATTERN, Job, cap_traceback
from shared.keys import Keys
from shared.queues import DEFAULT_QUEUE
from shared.replies import claimed_job, ids, text
from shared.scripts import base
from shared.scripts.base import ScriptsBase, now_arg

# Calls of trim.lua per Scripts.trim at most: with the default batch of 1,000, the scheduler's
# once-a-second trim keeps up with up to 100,000 finished jobs a second.
TRIM_ROUNDS = 100


@cache
def runnable_arg(types: frozenset[str] | None) -> str:
    """Return the claim scripts' runnable-types argument: '|a|b|', or '' for any type.

    A name no job can have (shared.jobs.TYPE_PATTERN; '|' among its characters) is left out:
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


def loss_keys(k: Keys) -> dict[str, str]:
    """Return the keys of a job losing its worker (lose_worker in common.lua)."""
    return {
        "processing": k.processing,
        "pending": k.pending,
        "pending_since": k.pending_since,
        "seq": k.seq,
        "wake": k.wake,
        "dead": k.dead,
        "canceled": k.canceled,
        "running": k.running,
        "held": k.held,
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
        k = self.q(queue)
        reply = self.transport.run(
            "claim",
            pending=k.pending,
            pending_since=k.pending_since,
            processing=k.processing,
            claim=k.last_claim(worker_id),
            wake=k.wake,
            paused=k.paused,
            **limit_keys(k),
            events=self._events_key(k),
            job_prefix=k.job_prefix,
            worker_id=worker_id,
            lease_ms=self.policy.lease_ms,
            request_id=request_id or base.new_request_id(),
            now_ms=now_arg(now_ms),
            runnable=runnable_arg(runnable),
            wake_cap=self.policy.wake_cap,
            events_cap=self._events_cap(),
        )
        if reply[0] == Code.PAUSED:
            raise QueuePaused(queue)
        return _claimed(reply, worker_id, queue)

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
    ) -> AckResult:
        """Record success with the job's result (JSON text); optionally claim the next job.

        With `claim_next_for` (a worker id) the worker's next job comes back in
        ``AckResult.next_job`` from the same round trip, as :meth:`claim` would return it (with
        `runnable` as there); a retried call (its reply lost) gets the job the first call
        claimed, found by the token. A paused queue claims nothing: ``AckResult.paused`` says
        so (the completion stands).
        """
        k, p = self.q(queue), self.policy
        worker = claim_next_for or ""
        reply, confirmation = self.transport.run_durable(
            "complete",
            k.slot_marker,
            job=k.job(job_id),
            processing=k.processing,
            completed=k.completed,
            pending=k.pending,
            pending_since=k.pending_since,
            wake=k.wake,
            paused=k.paused,
            **limit_keys(k),
            events=self._events_key(k),
            token=token,
            result=result_json,
            now_ms=now_arg(now_ms),
            job_prefix=k.job_prefix,
            worker_id=worker,
            lease_ms=p.lease_ms,
            runnable=runnable_arg(runnable),
            wake_cap=p.wake_cap,
            events_cap=self._events_cap(),
        )
        code = Code(reply[0])
        if code is Code.DONE and len(reply) == 2 and reply[1] == Code.PAUSED:
            return AckResult(code, paused=True, confirmation=confirmation)
        if code in (Code.DONE, Code.NOT_RUNNABLE):
            next_job = _claimed(reply, worker, queue)
            return AckResult(Code.DONE, next_job=next_job, confirmation=confirmation)
        return AckResult(code, text(reply[1]) if len(reply) > 1 else None)

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
        it, cut to shared.jobs.TRACEBACK_LIMIT bytes. `actor`: who reports it, for the job's
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

    def promote(
        self, *, queue: str = DEFAULT_QUEUE, limit: int | None = None, now_ms: int | None = None
    ) -> PromoteResult:
        """Make one queue's due scheduled and retrying jobs claimable."""
        k = self.q(queue)
        reply = self.transport.run(
            "promote",
            scheduled=k.scheduled,
            retrying=k.retrying,
            pending=k.pending,
            pending_since=k.pending_since,
            seq=k.seq,
            wake=k.wake,
            reply=k.reply(base.new_request_id()),
            events=self._events_key(k),
            job_prefix=k.job_prefix,
            limit=limit or self.policy.batch_limit,
            wake_cap=self.policy.wake_cap,
            now_ms=now_arg(now_ms),
            events_cap=self._events_cap(),
        )
        return PromoteResult(
            scheduled=ids(reply[0]),
            retrying=ids(reply[1]),
            scheduled_lateness_ms=[int(v) for v in reply[2]],
            retrying_lateness_ms=[int(v) for v in reply[3]],
            scheduled_types=ids(reply[4]),
            retrying_types=ids(reply[5]),
        )

    def recover(
        self, *, queue: str = DEFAULT_QUEUE, limit: int | None = None, now_ms: int | None = None
    ) -> RecoverResult:
        """Requeue one queue's jobs whose lease expired (or dead past the recovery cap)."""
        k, p = self.q(queue), self.policy
        reply = self.transport.run(
            "recover",
            **loss_keys(k),
            reply=k.reply(base.new_request_id()),
            events=self._events_key(k),
            job_prefix=k.job_prefix,
            limit=limit or p.batch_limit,
            max_recoveries=p.max_recoveries,
            dead_ttl_ms=p.dlq_max_age_ms,
            wake_cap=p.wake_cap,
            now_ms=now_arg(now_ms),
            canceled_ttl_ms=self._finished_ttl_ms(),
            events_cap=self._events_cap(),
        )
        return RecoverResult(
            requeued=ids(reply[0]),
            dead=ids(reply[1]),
            requeued_types=ids(reply[2]),
            dead_types=ids(reply[3]),
            canceled=ids(reply[4]),
            canceled_types=ids(reply[5]),
        )

    def release(
        self,
        job_id: str,
        token: int,
        *,
        drained: bool = False,
        queue: str = DEFAULT_QUEUE,
        actor: Actor = Actor.SUPERVISOR,
        canceling: bool = False,
        now_ms: int | None = None,
    ) -> AckResult:
        """Requeue a job whose worker is gone: a crash counts a recovery, a drain does not.

        `actor`: who releases it, for the job's history (a worker hands back a job it claimed
        and will not run). A job whose cancel was requested ends canceled instead (CANCELED);
        `canceling`: the supervisor killed its worker to stop it (its history says sigkill).
        """
        k, p = self.q(queue), self.policy
        reply = self.transport.run(
            "release",
            job=k.job(job_id),
            **loss_keys(k),
            events=self._events_key(k),
            token=token,
            mode=_loss_mode(drained, canceling),
            max_recoveries=p.max_recoveries,
            dead_ttl_ms=p.dlq_max_age_ms,
            wake_cap=p.wake_cap,
            request_id=base.new_request_id(),
            now_ms=now_arg(now_ms),
            actor=ACTOR_CODES[actor],
            canceled_ttl_ms=self._finished_ttl_ms(),
            events_cap=self._events_cap(),
        )
        code = Code(reply[0])
        detail = text(reply[1]) if len(reply) > 1 else None
        if code in (Code.DONE, Code.DEAD, Code.CANCELED):
            return AckResult(code, job_type=detail)
        return AckResult(code, detail)

    def release_worker(
        self,
        worker_id: str,
        *,
        drained: bool = False,
        queues: Sequence[str] = (DEFAULT_QUEUE,),
        canceling: bool = False,
        now_ms: int | None = None,
    ) -> list[Released]:
        """Requeue whatever job a dead worker still holds, found by its id (one call a queue).

        For a worker that died holding a job its supervisor never saw (inside a claim, or the
        complete that claims its next job). A crash counts a recovery, a drain does not.
        `queues`: every queue the worker served (its job can be in any of them). A job whose
        cancel was requested ends canceled (CANCELED); `canceling`: the supervisor killed the
        worker to stop it.
        """
        mode = _loss_mode(drained, canceling)
        released: list[Released] = []
        for queue in queues:
            released += self._release_worker(worker_id, mode, queue, now_ms)
        return released

    def _release_worker(
        self, worker_id: str, mode: str, queue: str, now_ms: int | None
    ) -> list[Released]:
        k, p = self.q(queue), self.policy
        reply = self.transport.run(
            "release_worker",
            **loss_keys(k),
            reply=k.reply(base.new_request_id()),
            events=self._events_key(k),
            job_prefix=k.job_prefix,
            worker_id=worker_id,
            mode=mode,
            max_recoveries=p.max_recoveries,
            dead_ttl_ms=p.dlq_max_age_ms,
            wake_cap=p.wake_cap,
            now_ms=now_arg(now_ms),
            canceled_ttl_ms=self._finished_ttl_ms(),
            events_cap=self._events_cap(),
        )
        return [
            Released(Code(code), text(jid) or "", text(t) or "", queue) for code, jid, t in reply
        ]

    def trim(
        self,
        *,
        queue: str = DEFAULT_QUEUE,
        limit: int | None = None,
        now_ms: int | None = None,
        rounds: int = TRIM_ROUNDS,
        share: int = 1,
    ) -> TrimResult:
        """Forget finished jobs past retention or their count cap, dead jobs past the DLQ's;
        first roll what finished since the last call into the per-minute throughput counts.

        Calls trim.lua again while a call may have left work (it hit `limit` in an index), at
        most `rounds` times: the scheduler trims once a second, and one call of `limit` would
        let the completed index outgrow its cap when more jobs than that finish each second.
        Each call stays short, so other clients run between them. `share`: how many queues
        share the caps (TASK_FINISHED_MAX_JOBS, TASK_DLQ_MAX_JOBS are totals: the scheduler
        gives each queue holding finished jobs an equal part, rounded up).
        """
        k, p = self.q(queue), self.policy
        limit = limit or p.batch_limit
        total = TrimResult(0, 0, 0)
        for _ in range(rounds):
            reply = self.transport.run(
                "trim",
                completed=k.completed,
                canceled=k.canceled,
                dead=k.dead,
                reply=k.reply(base.new_request_id()),
                failures=k.failures,
                throughput=k.throughput,
                job_prefix=k.job_prefix,
                retention_ms=p.finished_retention_ms,
                dead_max_age_ms=p.dlq_max_age_ms,
                dead_max_jobs=-(-p.dlq_max_jobs // share),
                limit=limit,
                now_ms=now_arg(now_ms),
                finished_max_jobs=-(-p.finished_max_jobs // share),
            )
            counts = [int(v) for v in reply]
            total = TrimResult(
                *(a + b for a, b in zip(dataclasses.astuple(total), counts, strict=True))
            )
            if max(counts) < limit:
                break
        return total


def _loss_mode(drained: bool, canceling: bool) -> str:
    """Return release.lua's and release_worker.lua's mode argument."""
    if canceling:
        return "cancel"
    return "drain" if drained else "crash"


def _claimed(reply: list[Any], worker_id: str, queue: str) -> Job | NotRunnable | None:
    """Return what a claim reply (claim.lua's, or complete.lua's claim part) holds."""
    if reply[0] == Code.NOT_RUNNABLE:
        return NotRunnable(queue, text(reply[1]) or "")
    if reply[0] == Code.DONE and len(reply) > 1:
        return claimed_job(reply[1:], worker_id, queue)
    return None
