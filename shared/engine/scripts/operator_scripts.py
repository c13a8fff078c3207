"""An operator's actions on one job or many: replay a dead job, cancel, purge.

The ``_each`` forms run one script per job on one pipeline (not a transaction: each call stays
short, other clients run between them), and each job answers alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from shared.engine.engine_types import CancelResult, Code, EngineError
from shared.engine.replies import checked, job_from_flat, text
from shared.engine.scripts import script_base as base
from shared.engine.scripts.script_base import ScriptsBase, now_arg
from shared.model.jobs import Job
from shared.model.queues import DEFAULT_QUEUE

TOMBSTONE_TTL_MS = 60 * 1000

# What a cancel request keeps of who asked: history's fields are '|'-separated lines.
_REQUESTER_UNSAFE = re.compile(r"[|\x00-\x1f\x7f]+")
REQUESTER_LIMIT = 64


def requester(by: str) -> str:
    """Return who asked for a cancel as a running job keeps it: no '|' nor control character
    (history's separators), at most REQUESTER_LIMIT bytes of UTF-8, spaces trimmed."""
    cleaned = _REQUESTER_UNSAFE.sub(" ", by).strip()
    data = cleaned.encode()[:REQUESTER_LIMIT]
    return data.decode(errors="ignore").strip()


class OperatorCalls(ScriptsBase):
    """The calls behind the operator API, the dashboard and the CLI's job actions."""

    def replay(self, job_id: str, *, queue: str = DEFAULT_QUEUE, now_ms: int | None = None) -> Job:
        """Return a dead job to pending with attempts 0; raise JobNotFound or WrongState."""
        reply = self.transport.run("replay", **self._replay_names(job_id, queue, now_ms))
        return job_from_flat(checked(reply)[1], queue)

    def _replay_names(self, job_id: str, queue: str, now_ms: int | None) -> dict[str, Any]:
        k = self.q(queue)
        return {
            "job": k.job(job_id),
            "dead": k.dead,
            "pending": k.pending,
            "pending_since": k.pending_since,
            "seq": k.seq,
            "wake": k.wake,
            "events": self._events_key(k),
            "request_id": base.new_request_id(),
            "wake_cap": self.policy.wake_cap,
            "now_ms": now_arg(now_ms),
            "events_cap": self._events_cap(),
        }

    def replay_each(
        self, jobs: Sequence[tuple[str, str]], *, now_ms: int | None = None
    ) -> list[Job | EngineError]:
        """Replay several dead jobs, (id, queue) each, in one round trip: replay.lua per job.

        Each answers alone: the job, or the JobNotFound or WrongState that replay would raise.
        """
        calls = [self._replay_names(jid, q, now_ms) for jid, q in jobs]
        replies = self._each("replay", calls)
        return [
            _or_error(reply, lambda r, q=queue: job_from_flat(r[1], q))
            for (_, queue), reply in zip(jobs, replies, strict=True)
        ]

    def cancel(
        self,
        job_id: str,
        *,
        queue: str = DEFAULT_QUEUE,
        by: str = "",
        now_ms: int | None = None,
    ) -> CancelResult:
        """Cancel a job that has not started, or ask for a running one to be stopped; raise
        JobNotFound or WrongState (completed, dead).

        `by`: who asks, kept with a running job's request (cleaned by :func:`requester`).
        """
        k = self.q(queue)
        reply = self.transport.run(
            "cancel",
            job=k.job(job_id),
            pending=k.pending,
            pending_since=k.pending_since,
            scheduled=k.scheduled,
            retrying=k.retrying,
            canceled=k.canceled,
            held=k.held,
            held_order=k.held_order,
            events=self._events_key(k),
            hash_ttl_ms=self._finished_ttl_ms(),
            now_ms=now_arg(now_ms),
            request_id=base.new_request_id(),
            requester=requester(by),
            events_cap=self._events_cap(),
        )
        checked(reply)
        return CancelResult(job_from_flat(reply[1], queue), changed=reply[0] == Code.DONE)

    def purge(self, job_id: str, *, queue: str = DEFAULT_QUEUE) -> str:
        """Delete a dead job and return its type; raise JobNotFound or WrongState."""
        reply = self.transport.run("purge", **self._purge_names(job_id, queue))
        return text(checked(reply)[1]) or ""

    def _purge_names(self, job_id: str, queue: str) -> dict[str, Any]:
        k = self.q(queue)
        return {
            "job": k.job(job_id),
            "dead": k.dead,
            "purged": k.tombstone(job_id),
            "events": self._events_key(k),
            "request_id": base.new_request_id(),
            "tombstone_ttl_ms": TOMBSTONE_TTL_MS,
            "events_cap": self._events_cap(),
        }

    def purge_each(self, jobs: Sequence[tuple[str, str]]) -> list[str | EngineError]:
        """Delete several dead jobs, (id, queue) each, in one round trip: purge.lua per job.

        Each answers alone: the type it deleted, or the JobNotFound or WrongState that purge
        would raise.
        """
        replies = self._each("purge", [self._purge_names(jid, q) for jid, q in jobs])
        return [_or_error(reply, lambda r: text(r[1]) or "") for reply in replies]

    def _each(self, name: str, calls: Sequence[dict[str, Any]]) -> list[Any]:
        """Run script `name` once per call (its KEYS and ARGV by name) on one pipeline.

        Each call carries its request id, so if Redis lost the scripts (NOSCRIPT; the calls
        before it may have run) the pipeline runs once more with the same ids, and a script
        answers a call it already made as it did the first time.
        """

        def pipeline() -> Any:
            pipe = self.redis.pipeline(transaction=False)
            for named in calls:
                self.transport.queue(pipe, name, **named)
            return pipe

        return self.transport.execute(pipeline)


def _or_error(reply: list[Any], value: Callable[[list[Any]], Any]) -> Any:
    """Return `value(reply)`, or the EngineError a negative code stands for (not raised)."""
    try:
        return value(checked(reply))
    except EngineError as exc:
        return exc
