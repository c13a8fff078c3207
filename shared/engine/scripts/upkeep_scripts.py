"""The upkeep that moves a queue's jobs between states on the scheduler's and supervisor's
duties: promote what is due, recover expired leases, release a lost worker's job, trim what
finished. Each call is one script; those that touch many jobs do a bounded batch per call."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from shared.engine.engine_types import (
    AckResult,
    Code,
    PromoteResult,
    RecoverResult,
    Released,
    TrimResult,
)
from shared.engine.history import ACTOR_CODES, Actor
from shared.engine.keys import Keys
from shared.engine.replies import ids, text
from shared.engine.scripts import script_base as base
from shared.engine.scripts.script_base import ScriptsBase, now_arg
from shared.model.job_ids import CLIENT_ID_MEMORY_MS
from shared.model.queues import DEFAULT_QUEUE

# Calls of trim.lua per Scripts.trim at most: with the default batch of 1,000, the scheduler's
# once-a-second trim keeps up with up to 100,000 finished jobs a second.
TRIM_ROUNDS = 100


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


class UpkeepCalls(ScriptsBase):
    """The calls of workerd's scheduler and supervisor on a queue's jobs."""

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
        running: str,
        drained: bool = False,
        queues: Sequence[str] = (DEFAULT_QUEUE,),
        canceling: bool = False,
        isolate: bool = False,
        now_ms: int | None = None,
    ) -> list[Released]:
        """Requeue whatever job a dead worker still holds, found by its id (one call a queue).

        For a worker that died holding a job its supervisor never saw (inside a claim, or the
        complete that claims its next job). `running`: the job its slot showed running, or ''
        for none: only that job gets the mode (a crash counts a recovery, a drain does not);
        any other job held never started, could not have killed its worker, and goes back as a
        drain gives it. `queues`: every queue the worker served (its job can be in any of
        them). A job whose cancel was requested ends canceled (CANCELED); `canceling`: the
        supervisor killed the worker to stop it. `isolate`: counts nothing and marks the job to
        run alone in its next worker process (a threaded worker's death nobody could attribute).
        """
        mode = "isolate" if isolate else _loss_mode(drained, canceling)
        released: list[Released] = []
        for queue in queues:
            released += self._release_worker(worker_id, mode, running, queue, now_ms)
        return released

    def _release_worker(
        self, worker_id: str, mode: str, running: str, queue: str, now_ms: int | None
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
            events_cap=p.events_cap,  # sent, 0 when off: `running_job` follows it
            running_job=running,
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
                client_id_memory_ms=CLIENT_ID_MEMORY_MS,
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
