"""Producing jobs: enqueue one, a batch all or none, idempotency keys, and the due index.

An enqueue with an idempotency key is two calls: reserve.lua (or reserve_batch.lua) ties the key
to the job ids in the global slot, then enqueue.lua creates each job in its queue's slot (no
script spans two). A delayed job is also noted in the due index (``Keys.due``, global slot), so
the scheduler promotes only queues with something due: a cross-slot write (shared.engine.scripts.
cross_slot), declared in shared.engine.scripts.due_index.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

from shared.connect.redis_conn import is_cluster
from shared.engine.engine_types import (
    Code,
    Confirmation,
    EnqueueResult,
    IdempotencyConflict,
    JobIdConflict,
)
from shared.engine.history import ACTOR_CODES, Actor
from shared.engine.replies import enqueue_result, text
from shared.engine.scripts.cross_slot import follow
from shared.engine.scripts.due_index import DUE_INDEX
from shared.engine.scripts.script_base import ScriptsBase, now_arg
from shared.model.jobs import EnqueueRequest, JobState

# Hex digits of a request's SHA-256 kept with a client-id job (128 bits: two different bodies
# under one id are told apart but for a 2^-128 chance), against the 64 an Idempotency-Key keeps.
CLIENT_DIGEST_HEX = 32


def batch_digest(requests: Sequence[EnqueueRequest]) -> str:
    """Return the idempotency digest of a batch: equal for the same jobs in the same order.

    Domain-separated from a single request's (the hash of its canonical text alone), so a key
    used for one enqueue and then for a batch of that one job is a conflict, never a match.
    A canonical text holds no raw newline (JSON escapes it), so the separator is unambiguous.
    """
    digest = hashlib.sha256(b"batch\n")
    for request in requests:
        digest.update(request.canonical().encode())
        digest.update(b"\n")
    return digest.hexdigest()


class EnqueueCalls(ScriptsBase):
    """The calls of producers (the gateway, the client, periodic schedules)."""

    def enqueue(
        self,
        request: EnqueueRequest,
        job_id: str,
        *,
        idempotency_key: str | None = None,
        now_ms: int | None = None,
        traceparent: str | None = None,
        actor: Actor | None = None,
    ) -> EnqueueResult:
        """Create a job (pending, or scheduled when scheduled_at is in the future or a delay
        above 0 is given; the delay counts from Redis's clock). `actor`: who its history says
        enqueued it (None: the api; a periodic schedule's tick passes Actor.SCHEDULER).

        With an idempotency key, two calls: reserve.lua ties the key to this job id in the
        global slot, then enqueue.lua creates the job in its queue's slot (no script spans
        two). A repeat of the request finds the key naming the job and answers DUPLICATE.

        A request with its client's own id (``request.id``, which must be `job_id`) is one
        call: enqueue.lua stores the request's digest with the job, and a repeat answers the
        job (created False) or, with another digest, raises JobIdConflict.
        """
        if request.id is not None and (request.id != job_id or idempotency_key is not None):
            raise ValueError("a client's job id is the job id, and takes no idempotency key")
        duplicate = False
        if idempotency_key is not None:
            job_id, queue, duplicate = self._reserve(request, job_id, idempotency_key)
            request = (
                request if queue == request.queue else dataclasses.replace(request, queue=queue)
            )
        # Durable mode: the marker before WAIT also covers the key reserve.lua wrote, and a
        # repeat that writes nothing (shared.engine.durable).
        reply, confirmation = self.transport.run_durable(
            "enqueue",
            self.q(request.queue).slot_marker,
            **self._enqueue_names(request, job_id, now_ms, traceparent, actor),
        )
        result = enqueue_result(reply)
        if result.status is JobState.SCHEDULED:
            self.note_due([(request, result)])
        if confirmation is not None:  # durable mode only: nothing more on the hot path when off
            if idempotency_key is not None:
                written = [self.q(request.queue).slot_marker]
                confirmation = self.transport.confirm_masters(
                    "enqueue", confirmation, written, [self.keys.global_slot_marker]
                )
            result = dataclasses.replace(result, confirmation=confirmation)
        # The key named an earlier request's job: an answer about that job (200), even when
        # this call had to create it (deleted since, or never created: its producer died
        # between the two calls), under the same id, so racing repeats create one job and
        # only the request that reserved the key answers "created". A client id's repeat
        # found its job: not created either.
        if duplicate or (request.id is not None and result.existed):
            return dataclasses.replace(result, created=False)
        return result

    def _reserve(
        self, request: EnqueueRequest, job_id: str, idempotency_key: str
    ) -> tuple[str, str, bool]:
        """Tie the key to this request's job; return (job id, queue, whether it was earlier)."""
        reply = self.transport.run(
            "reserve",
            idem=self.keys.idempotency(idempotency_key),
            digest=request.digest(),
            job_id=job_id,
            queue=request.queue,
            ttl_ms=self.policy.idempotency_ttl_ms,
        )
        code = Code(reply[0])
        if code is Code.CONFLICT:
            raise IdempotencyConflict(text(reply[1]) or "")
        return text(reply[1]) or job_id, text(reply[2]) or request.queue, code is Code.DUPLICATE

    def enqueue_many(
        self,
        requests: Sequence[tuple[EnqueueRequest, str]],
        *,
        idempotency_key: str | None = None,
        now_ms: int | None = None,
        traceparent: str | None = None,
    ) -> list[EnqueueResult]:
        """Create several jobs, all or none (one MULTI/EXEC round trip), in the given order.

        On a Redis Cluster a transaction cannot span slots, so it is all or none per queue:
        one MULTI/EXEC per queue, one queue after another (docs/CLUSTER.md). A producer that
        lost the answer resends with its Idempotency-Key and gets the rest created.

        With an idempotency key, one call more first: reserve_batch.lua ties the key to these
        job ids in the global slot. A repeat of the same batch finds the key naming the
        earlier ids and runs the same transaction with those: it creates what its producer
        never created (it died between the two calls) and only answers what exists, every
        result DUPLICATE (created False).
        """
        duplicate = False
        if any(request.id is not None for request, _ in requests):
            self._check_client_ids(requests, idempotency_key)
        if idempotency_key is not None:
            requests, duplicate = self._reserve_batch(requests, idempotency_key)
        results = self._enqueue_transaction(requests, now_ms, traceparent)
        if self.policy.wait_replicas:
            # WAIT inside MULTI would not block: the marker and WAIT follow the transaction
            # (the marker makes the WAIT cover it, whichever pooled connection ran it).
            confirmation = self._confirm_batch(requests, idempotency_key is not None)
            results = [dataclasses.replace(r, confirmation=confirmation) for r in results]
        if duplicate:
            # As for a single enqueue: only the request that reserved the key answers "created".
            return [dataclasses.replace(result, created=False) for result in results]
        return results

    def _check_client_ids(
        self, requests: Sequence[tuple[EnqueueRequest, str]], idempotency_key: str | None
    ) -> None:
        """Raise JobIdConflict before a batch writes anything when a client's id already names
        a job with another body (one round trip: an HGET per client id).

        A transaction cannot undo the jobs before a refused one, so the batch stays all or none
        by this read. Not atomic with the write: a different body sent under the same id at
        the same moment may still be refused inside the transaction, after its other jobs
        were made (enqueue.lua refuses it and writes nothing for it).
        """
        if idempotency_key is not None:
            raise ValueError("a client's job id takes no idempotency key")
        given = [(request, job_id) for request, job_id in requests if request.id is not None]
        if any(request.id != job_id for request, job_id in given):
            raise ValueError("a client's job id is the job id")
        pipe = self.redis.pipeline(transaction=False)
        for request, job_id in given:
            pipe.hget(self.q(request.queue).job(job_id), "digest")
        for (request, job_id), held in zip(given, pipe.execute(), strict=True):
            if held is not None and held.decode() != request.digest()[:CLIENT_DIGEST_HEX]:
                raise JobIdConflict(job_id)

    def _confirm_batch(
        self, requests: Sequence[tuple[EnqueueRequest, str]], keyed: bool
    ) -> Confirmation:
        """WAIT after a batch: one marker and WAIT on one Redis; on a cluster, one on each master
        the batch wrote (its queues' slots, and the global slot's for an idempotency key)."""
        queues = dict.fromkeys(request.queue for request, _ in requests)
        markers = [self.q(queue).slot_marker for queue in queues]
        if keyed:
            markers.append(self.keys.global_slot_marker)
        _, confirmation = self.transport.write_then_wait(
            "enqueue_batch", lambda pipe: None, markers[0]
        )
        return self.transport.confirm_masters(
            "enqueue_batch", confirmation, markers[:1], markers[1:]
        )

    def _reserve_batch(
        self, requests: Sequence[tuple[EnqueueRequest, str]], idempotency_key: str
    ) -> tuple[list[tuple[EnqueueRequest, str]], bool]:
        """Tie the key to this batch's jobs; return the batch under the ids the key names (this
        call's, or an earlier same batch's) and whether they were an earlier call's."""
        reply = self.transport.run(
            "reserve_batch",
            idem=self.keys.idempotency(idempotency_key),
            digest=batch_digest([request for request, _ in requests]),
            jobs=",".join(f"{job_id} {request.queue}" for request, job_id in requests),
            ttl_ms=self.policy.idempotency_ttl_ms,
        )
        code = Code(reply[0])
        if code is Code.CONFLICT:
            raise IdempotencyConflict(text(reply[1]) or "")
        if code is Code.DONE:
            return list(requests), False
        # Each entry is "<id> <queue>"; the digest covers every job's queue, so a same batch's
        # jobs go to the queues this one names, in the same order: only the ids are taken.
        ids = [entry.split(" ", 1)[0] for entry in (text(reply[1]) or "").split(",")]
        batch = [(request, job_id) for (request, _), job_id in zip(requests, ids, strict=True)]
        return batch, True

    def _enqueue_transaction(
        self,
        requests: Sequence[tuple[EnqueueRequest, str]],
        now_ms: int | None,
        traceparent: str | None,
    ) -> list[EnqueueResult]:
        """Create the batch's jobs all or none, answers in order: one MULTI/EXEC on one Redis;
        on a cluster, where a transaction cannot span slots, one per queue, one after another.

        A transaction that met NOSCRIPT wrote nothing, since all its calls are the same script:
        the cache emptied (SCRIPT FLUSH, restart, failover) before its EXEC, so the transport
        loads the scripts and it runs once more.
        """
        cluster = is_cluster(self.redis)
        groups: dict[str, list[int]] = {}
        for index, (request, _) in enumerate(requests):
            groups.setdefault(request.queue if cluster else "", []).append(index)
        results: list[EnqueueResult | None] = [None] * len(requests)
        for indexes in groups.values():

            def transaction(indexes: list[int] = indexes) -> Any:
                pipe = self.redis.pipeline(transaction=True)
                for index in indexes:
                    request, job_id = requests[index]
                    names = self._enqueue_names(request, job_id, now_ms, traceparent, None)
                    self.transport.queue(pipe, "enqueue", **names)
                return pipe

            for index, reply in zip(indexes, self.transport.execute(transaction), strict=True):
                result = enqueue_result(reply)
                if result.existed and requests[index][0].id is not None:
                    result = dataclasses.replace(result, created=False)  # a client id's repeat
                results[index] = result
        done = [result for result in results if result is not None]
        self.note_due(
            [
                (request, result)
                for (request, _), result in zip(requests, done, strict=True)
                if result.status is JobState.SCHEDULED
            ]
        )
        return done

    def _enqueue_names(
        self,
        request: EnqueueRequest,
        job_id: str,
        now_ms: int | None,
        traceparent: str | None,
        actor: Actor | None,
    ) -> dict[str, Any]:
        """Return enqueue.lua's KEYS and ARGV by name.

        With an `actor` or a client's id the events cap is always sent ('0' when off): the
        actor, then the digest, come after it.
        """
        k = self.q(request.queue)
        digest = None if request.id is None else request.digest()[:CLIENT_DIGEST_HEX]
        if actor is None and digest is None:
            events_cap, actor_code = self._events_cap(), None
        else:
            events_cap = self.policy.events_cap
            actor_code = "" if actor is None else ACTOR_CODES[actor]
        return {
            "job": k.job(job_id),
            "pending": k.pending,
            "pending_since": k.pending_since,
            "seq": k.seq,
            "wake": k.wake,
            "scheduled": k.scheduled,
            "events": self._events_key(k),
            "job_id": job_id,
            "type": request.type,
            "payload": request.payload_json,
            "priority": request.priority,
            "max_retries": request.max_retries,
            "scheduled_at_ms": "" if request.scheduled_at_ms is None else request.scheduled_at_ms,
            "delay_ms": "" if request.delay_ms is None else request.delay_ms,
            "timeout": "" if request.timeout is None else repr(request.timeout),
            "wake_cap": self.policy.wake_cap,
            "now_ms": now_arg(now_ms),
            "traceparent": traceparent or "",
            "events_cap": events_cap,
            "actor": actor_code,
            "digest": digest,
        }

    def note_due(self, scheduled: Sequence[tuple[EnqueueRequest, EnqueueResult]]) -> None:
        """Index the queues of jobs just scheduled by when they are due: one ZADD LT in the
        global slot, after the scripts that scheduled them (none when there are none).

        The second call of a delayed enqueue (shared.engine.scripts.cross_slot, the due index's
        declaration in shared.engine.scripts.due_index): LT lowers an entry or adds a missing one,
        never delays one. The jobs exist once their script ran, so a note that fails (the
        global slot's master unreachable) is logged, not raised: an error would tell the
        producer to send them again. workerd/sweep.py restores them, as those of a producer
        that died here.
        """
        earliest: dict[str, int] = {}
        for request, result in scheduled:
            at = request.scheduled_at_for(result.created_at_ms)
            if at is not None:
                earliest[request.queue] = min(at, earliest.get(request.queue, at))
        follow(self.redis, self.keys, DUE_INDEX, earliest)

    def due_queues(self, pipe: Any, now_ms: int, limit: int) -> None:
        """Queue on `pipe` the read of up to `limit` queues whose earliest scheduled job is due."""
        pipe.zrangebyscore(self.keys.due, "-inf", now_ms, start=0, num=limit)

    def settle_due(self, queues: Sequence[str]) -> dict[str, int]:
        """Re-index `queues` after their promote: remove their entries, then read each queue's
        earliest scheduled job and put back those found (ZADD LT); return them.

        The order is the protocol. A producer's note (ZADD LT) made after the ZREM stays; a
        producer whose script ran before the read is seen by the read. Either way the entry of
        a job scheduled meanwhile survives. Three round trips, only for due queues.
        """
        if not queues:
            return {}
        self.redis.zrem(self.keys.due, *queues)
        return self.reindex_due(queues)

    def reindex_due(self, queues: Sequence[str]) -> dict[str, int]:
        """Add (ZADD LT) each queue's earliest scheduled job to the due index; return them."""
        pipe = self.redis.pipeline(transaction=False)
        for queue in queues:
            pipe.zrange(self.q(queue).scheduled, 0, 0, withscores=True)
        found = {q: int(f[0][1]) for q, f in zip(queues, pipe.execute(), strict=True) if f}
        if found:
            DUE_INDEX.send(self.redis, self.keys.due, found)
        return found
