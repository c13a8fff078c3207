"""A queue's own state: pause and resume, concurrency and rate limits, the list of queues."""

from __future__ import annotations

from shared.engine.engine_types import Code, QueuePause
from shared.engine.scripts.script_base import ScriptsBase, now_arg
from shared.model.job_ids import queue_tag
from shared.model.queues import DEFAULT_QUEUE


class QueueCalls(ScriptsBase):
    """The calls that change what a queue lets through, and which queues exist."""

    def pause_queue(self, queue: str, *, now_ms: int | None = None) -> QueuePause:
        """Pause a queue: no claim takes from it until resume_queue (jobs still arrive)."""
        k = self.q(queue)
        reply = self.transport.run(
            "pause_queue",
            paused=k.paused,
            events=self._events_key(k),
            now_ms=now_arg(now_ms),
            events_cap=self._events_cap(),
        )
        return QueuePause(since_ms=int(reply[1]), changed=reply[2] == 1)

    def resume_queue(self, queue: str) -> bool:
        """Let workers claim from a queue again; return whether it was paused."""
        k = self.q(queue)
        reply = self.transport.run(
            "resume_queue",
            paused=k.paused,
            pending=k.pending,
            wake=k.wake,
            events=self._events_key(k),
            wake_cap=self.policy.wake_cap,
            events_cap=self._events_cap(),
        )
        return reply[1] == 1

    def set_limits(
        self, queue: str, limits_json: str, *, expected: str | None = None
    ) -> tuple[int, int] | None:
        """Replace a queue's limits (compact JSON, shared.engine.limits), or clear them with "".

        `expected`: the stored limits this change was computed from ("" for none); None
        replaces whatever is there. Returns (running jobs given a slot they lacked, held jobs
        returned to pending), or None when the limits were no longer
        `expected` (nothing changed: read again and retry). set_limits.lua.
        """
        k = self.q(queue)
        if limits_json:
            # Listed first (the global slot: a call of its own), as a queue before its first
            # job: a crash in between leaves a name listed with no limits, which costs nothing.
            self.redis.sadd(self.keys.limited, queue)
        reply = self.transport.run(
            "set_limits",
            limits=k.limits,
            running=k.running,
            held=k.held,
            processing=k.processing,
            pending=k.pending,
            wake=k.wake,
            gates=k.gates,
            buckets=k.buckets,
            held_order=k.held_order,
            limits_json=limits_json,
            job_prefix=k.job_prefix,
            wake_cap=self.policy.wake_cap,
            expected="*" if expected is None else expected,
        )
        if reply[0] == Code.CONFLICT:
            return None
        if not limits_json:
            self.redis.srem(self.keys.limited, queue)
        return int(reply[1]), int(reply[2])

    def open_gates(self, *, queue: str = DEFAULT_QUEUE, now_ms: int | None = None) -> int:
        """Let jobs held by a rate limit go where tokens are back; return how many went."""
        k = self.q(queue)
        reply = self.transport.run(
            "open_gates",
            gates=k.gates,
            limits=k.limits,
            buckets=k.buckets,
            held=k.held,
            pending=k.pending,
            wake=k.wake,
            held_order=k.held_order,
            now_ms=now_arg(now_ms),
            wake_cap=self.policy.wake_cap,
            limit=self.policy.batch_limit,
        )
        return int(reply)

    def register_queue(self, queue: str) -> None:
        """Add a queue to the list of queues and its job ids' tag to the tag map (shared.model.job_ids).

        One MULTI in the global slot (both SADDs, so a repeat changes nothing): called before
        a job is first enqueued under a name, and again after an enqueue that was the queue's
        first since it was deleted, so every queue with a job is listed and its jobs found by id.
        """
        pipe = self.redis.pipeline(transaction=True)
        pipe.sadd(self.keys.queues, queue)
        pipe.sadd(self.keys.queue_tag(queue_tag(queue)), queue)
        pipe.execute()

    def unregister_queue(self, queue: str) -> None:
        """Take a queue off the list of queues and the tag map (one MULTI, global slot)."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.srem(self.keys.queues, queue)
        pipe.srem(self.keys.queue_tag(queue_tag(queue)), queue)
        pipe.execute()

    def delete_queue(self, queue: str, *, delete: bool = True) -> list[int] | None:
        """Delete an empty queue's keys (or, `delete` False, only check it is empty).

        Returns None when the queue was empty (and deleted), else what keeps it: pending,
        held, scheduled, retrying, processing, dead (counts), paused, limited (1/0).
        shared.read.queue_removal orders this call with the list's (docs/QUEUES.md).
        """
        k = self.q(queue)
        reply = self.transport.run(
            "delete_queue",
            pending=k.pending,
            held=k.held,
            scheduled=k.scheduled,
            retrying=k.retrying,
            processing=k.processing,
            dead=k.dead,
            paused=k.paused,
            limits=k.limits,
            completed=k.completed,
            canceled=k.canceled,
            others=[
                k.seq,
                k.pending_since,
                k.wake,
                k.failures,
                k.events,
                k.throughput,
                k.running,
                k.held_order,
                k.buckets,
                k.gates,
                k.slot_marker,
            ],
            job_prefix=k.job_prefix,
            delete="1" if delete else "0",
        )
        if Code(reply[0]) is Code.DONE:
            return None
        return [int(n) for n in reply[1:]]
