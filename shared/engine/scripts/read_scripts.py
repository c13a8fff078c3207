"""Reads: counts per state and of the fleet, pages of a state index, throughput per minute.

Reads change nothing, so their pipelines are safe to run again after NOSCRIPT: the calls go
out bare (no SCRIPT EXISTS round trip first) and the transport answers NOSCRIPT.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shared.engine.queries import QueueCounts, WorkerCounts
from shared.engine.replies import text
from shared.engine.scripts.script_base import ScriptsBase, now_arg
from shared.model.jobs import JobState
from shared.model.queues import DEFAULT_QUEUE


class ReadCalls(ScriptsBase):
    """The read scripts' calls: the overview, listings (shared.read.listing), throughput."""

    def stats(
        self, queues: Sequence[str] | None = None, *, now_ms: int | None = None
    ) -> tuple[QueueCounts, WorkerCounts]:
        """Return jobs per state (all queues, and each) and fleet-wide worker counts.

        One pipelined round trip (one read per queue, one of the registry) after reading the
        list of queues, unless `queues` names them. Each queue's counts also say whether it is
        paused and what it completed and failed in the last minute (queue_stats.lua).
        """
        names = list(queues) if queues is not None else self.queue_names()
        replies = self.transport.execute(lambda: self._stats_pipeline(names, now_ms))
        *per_queue, (hosts, live, busy, quiet) = replies
        by_queue = {
            name: _queue_counts(reply) for name, reply in zip(names, per_queue, strict=True)
        }
        return QueueCounts.combined(by_queue), WorkerCounts(hosts, live, busy, quiet)

    def queue_names(self) -> list[str]:
        """Return every queue a job was enqueued under (the default queue always), sorted."""
        names = {text(name) or "" for name in self.redis.smembers(self.keys.queues)}
        return sorted(names | {DEFAULT_QUEUE})

    def _stats_pipeline(self, names: Sequence[str], now_ms: int | None) -> Any:
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            k = self.q(name)
            self.transport.queue(
                pipe,
                "queue_stats",
                pending=k.pending,
                scheduled=k.scheduled,
                processing=k.processing,
                retrying=k.retrying,
                completed=k.completed,
                dead=k.dead,
                canceled=k.canceled,
                pending_since=k.pending_since,
                paused=k.paused,
                failures=k.failures,
                held=k.held,
                now_ms=now_arg(now_ms),
            )
        self.transport.queue(
            pipe, "fleet", workers=self.keys.workers, worker_prefix=self.keys.worker_prefix
        )
        return pipe

    def list_page(
        self,
        pipe: Any,
        *,
        queue: str,
        state: JobState,
        order: str,
        after: tuple[int, str] | None,
        limit: int,
        budget: int,
        job_type: str | None,
        held: bool = False,
    ) -> None:
        """Queue a read of one page of a queue's state index on `pipe` (list_page.lua).

        shared.read.listing sends one per queue on one pipeline (run by execute_loaded), parses the
        replies and merges them. `held`: read the pending jobs a limit holds (``held_order``,
        ordered as ``pending``) instead of the index.
        """
        k = self.q(queue)
        self.transport.queue(
            pipe,
            "list_page",
            state=k.held_order if held else k.state_index(state),
            job_prefix=k.job_prefix,
            order=order,
            after_score="" if after is None else str(after[0]),
            after_member="" if after is None else after[1],
            limit=limit,
            budget=budget,
            job_type=job_type or "",
        )

    def throughput(self, pipe: Any, *, queue: str, minutes: int, now_ms: int | None) -> None:
        """Queue a read of one queue's completions and failures per minute (throughput.lua).

        shared.read.throughput sends one per queue on one pipeline (run by execute_loaded).
        """
        k = self.q(queue)
        self.transport.queue(
            pipe,
            "throughput",
            throughput=k.throughput,
            completed=k.completed,
            failures=k.failures,
            now_ms=now_arg(now_ms),
            minutes=minutes,
        )


def _queue_counts(reply: list[Any]) -> QueueCounts:
    cards, oldest, now, paused_since, completed, failed = reply
    age = None if oldest < 0 else max(0, now - oldest)
    return QueueCounts(
        dict(zip(JobState, cards, strict=True)),
        oldest_pending_age_ms=age,
        paused_since_ms=None if paused_since < 0 else paused_since,
        completed_last_minute=completed,
        failed_last_minute=failed,
    )
