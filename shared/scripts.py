"""The engine's state transitions: one Lua script each, one typed Python function each.

Scripts live in ``shared/lua/<name>.lua`` and are registered once (EVALSHA, reloaded on
NOSCRIPT after a Redis restart or failover). ``--- @include "x"`` lines pull in the
definitions of ``lua/includes/x.lua`` the script uses (shared.lua_source), so shared helpers
are written once yet every script stays one atomic unit. Every method takes an optional
``now_ms`` that overrides Redis's clock (tests).

Out of memory (``maxmemory`` with ``noeviction``): every script opens with a ``#!lua`` flags line,
so Redis refuses it whole rather than letting it write half its effects. enqueue has no flags:
producers get a clear refusal. Every other script is ``allow-oom``: they move existing jobs
(and trim), so workers keep draining the queue while new work is refused.

Events (docs/EVENTS.md): each transition script appends its own event to the events stream
(one for every queue on one Redis, the queue's own on a Cluster: ``_events_key``), passed as
its last key, with ``Policy.events_cap`` as its last argument;
with events off (a cap of 0, TASKFORGE_EVENTS=off) neither is passed and it writes none.
heartbeat.lua always gets the hosts' stream (``Keys.fleet_events``) and the cap, 0 when off.

Durable mode (``Policy.wait_replicas`` ≥ 1, shared.durable): the writes that acknowledge work
(enqueue, enqueue_many, complete, fail, cancel_running) are followed by WAIT, and their results
carry what it answered (``confirmation``; None when the mode is off, and then nothing is sent).
The callers decide what an unconfirmed write means: a 503, or an outcome left uncounted.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import random
import re
import secrets
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import redis

from shared import durable
from shared.engine_types import (
    AckResult,
    CancelResult,
    Code,
    Confirmation,
    EngineError,
    EnqueueResult,
    FailResult,
    HostBeat,
    HostNotFound,
    IdempotencyConflict,
    JobNotFound,
    NotRunnable,
    Policy,
    PromoteResult,
    QueuePause,
    QueuePaused,
    RecoverResult,
    Released,
    ScheduleNotFound,
    TrimResult,
    WrongState,
)
from shared.events import per_queue_streams
from shared.history import ACTOR_CODES, Actor
from shared.job_ids import queue_tag
from shared.jobs import TYPE_PATTERN, EnqueueRequest, Job, JobState, cap_traceback
from shared.keys import Keys
from shared.log import error_text
from shared.lua_source import assemble
from shared.queries import QueueCounts, WorkerCounts
from shared.queues import DEFAULT_QUEUE
from shared.redis_conn import is_cluster
from shared.replies import (
    checked,
    claimed_job,
    enqueue_result,
    ids,
    job_from_flat,
    text,
)

# The engine's public surface; the result types live in shared.engine_types.
__all__ = [
    "SCRIPT_NAMES",
    "AckResult",
    "CancelResult",
    "Code",
    "Confirmation",
    "EngineError",
    "EnqueueResult",
    "FailResult",
    "HostBeat",
    "HostNotFound",
    "IdempotencyConflict",
    "JobNotFound",
    "NotRunnable",
    "Policy",
    "PromoteResult",
    "QueuePause",
    "QueuePaused",
    "RecoverResult",
    "Released",
    "ScheduleNotFound",
    "Scripts",
    "TrimResult",
    "WrongState",
    "batch_digest",
    "load_source",
    "new_request_id",
    "runnable_arg",
]

log = logging.getLogger(__name__)

SCRIPT_NAMES = (
    "reserve",
    "reserve_batch",
    "enqueue",
    "claim",
    "renew",
    "complete",
    "fail",
    "promote",
    "recover",
    "release",
    "release_worker",
    "replay",
    "cancel",
    "cancel_running",
    "purge",
    "trim",
    "throughput",
    "heartbeat",
    "queue_stats",
    "fleet",
    "list_page",
    "pause_queue",
    "resume_queue",
    "quiet_host",
    "set_limits",
    "open_gates",
    "advance_schedule",
    "pause_schedule",
    "resume_schedule",
    "publish_schedules",
    "delete_queue",
)
# Hashes of canceled jobs outlive their index entry by this much: trim.lua deletes both at
# retention; the TTL only matters if trimming stopped (no scheduler running). Completed jobs
# have no TTL (bounded by trim's count cap alone: an expires entry per job costs memory).
HASH_TTL_MARGIN_MS = 5 * 60 * 1000
TOMBSTONE_TTL_MS = 60 * 1000
# Calls of trim.lua per Scripts.trim at most: with the default batch of 1,000, the scheduler's
# once-a-second trim keeps up with up to 100,000 finished jobs a second.
TRIM_ROUNDS = 100


@cache
def load_source(name: str) -> str:
    """Return a script's Lua as Redis runs it: includes expanded to the definitions it uses."""
    return assemble(name)


def _now(now_ms: int | None) -> str:
    return "" if now_ms is None else str(int(now_ms))


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


def new_request_id() -> str:
    """Return a fresh request id: a script answers a repeat of the same id as the first call."""
    return secrets.token_hex(8)


class Scripts:
    """Calls the transition scripts; one instance per process, built after fork."""

    def __init__(self, client: redis.Redis, keys: Keys | None = None, policy: Policy | None = None):
        self.redis = client
        self.keys = keys or Keys()
        self.policy = policy or Policy()
        self._scripts = {n: client.register_script(self._source(n)) for n in SCRIPT_NAMES}

    def _source(self, name: str) -> str:
        """Return the Lua to register for a script (a test double may adapt it)."""
        return load_source(name)

    def load(self) -> None:
        """Load every script into Redis now, so a broken script fails start-up, not a job."""
        for script in self._scripts.values():
            self.redis.script_load(script.script)

    def ensure_loaded(self) -> bool:
        """Load the scripts if Redis lacks any (one SCRIPT EXISTS when it has them all).

        Returns whether they were all there already. Readiness probes call this: a Redis
        restart or failover empties the script cache.
        """
        shas = [script.sha for script in self._scripts.values()]
        if all(self.redis.script_exists(*shas)):
            return True
        self.load()
        return False

    def ensure_loaded_on(self, node: Any) -> bool:
        """ensure_loaded on one cluster master (`node`, a redis-py ClusterNode) only.

        A cluster's readiness checks each master apart (shared.cluster_health): one that fails
        over must not hide that the others answer.
        """
        shas = [script.sha for script in self._scripts.values()]
        found = self.redis.execute_command("SCRIPT EXISTS", *shas, target_nodes=node)
        if all(found):
            return True
        for script in self._scripts.values():
            self.redis.execute_command("SCRIPT LOAD", script.script, target_nodes=node)
        return False

    def _events_key(self, k: Keys) -> list[str]:
        """Return a script's last key: the events stream, or none with events off.

        One Redis (and Sentinel) enforces no slots: every queue writes the one stream
        (``Keys.fleet_events``), so a reader's cursor is one id. A Redis Cluster script touches
        one slot, so there each queue writes its own (``Keys.events``; docs/EVENTS.md).
        """
        if not self.policy.events_cap:
            return []
        return [k.events if per_queue_streams(self.redis) else k.fleet_events]

    def _events_cap(self) -> list[int]:
        """Return a script's last argument: the events cap, or none with events off.

        Off, the scripts get neither the key nor the cap, and write nothing: each costs Redis
        about 1 % of a job's instructions to receive (bench.events_cost), so off is as before.
        """
        return [self.policy.events_cap] if self.policy.events_cap else []

    @staticmethod
    def _limit_keys(k: Keys) -> list[str]:
        """Return the limits' keys a claim passes (includes/common.lua, "Concurrency and rate")."""
        return [k.limits, k.running, k.held, k.buckets, k.gates, k.held_order]

    def q(self, queue: str) -> Keys:
        """Return the key builder of one queue (the global keys are the same on every one)."""
        return self.keys.for_queue(queue)

    def _piped(self, pipe: Any, name: str, keys: Sequence[str], args: Sequence[Any]) -> None:
        """Queue one script call on a pipeline (its reply comes from ``pipe.execute()``)."""
        self._scripts[name](keys=keys, args=args, client=pipe)

    def _call(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        script = self._scripts[name]
        try:
            return script(keys=keys, args=args)
        except redis.exceptions.NoScriptError:
            # redis-py reloads a missing script and tries once more; the cache emptied again in
            # between (SCRIPT FLUSH, restart, failover). The script did not run: once more.
            return script(keys=keys, args=args)

    def _call_durable(
        self, name: str, keys: Sequence[str], args: Sequence[Any], queue: str
    ) -> tuple[Any, Confirmation | None]:
        """Call a script whose write acknowledges work; in durable mode (Policy.wait_replicas)
        WAIT for the replicas after it, on the same pipeline (shared.durable). Returns the reply
        and what WAIT answered (None when the mode is off: exactly :meth:`_call`). `queue`: the
        queue whose slot the script writes (where a cluster's marker goes)."""
        if not self.policy.wait_replicas:
            return self._call(name, keys, args), None

        def write(pipe: Any) -> None:
            self._piped_bare(pipe, name, keys, args)

        marker = self.q(queue).slot_marker
        try:
            return self._write_then_wait(name, write, marker)
        except redis.exceptions.NoScriptError:
            # Redis lost the scripts (restart, failover): this one did not run. Load, once more.
            self.load()
            return self._write_then_wait(name, write, marker)

    def _write_then_wait(
        self, op: str, queue_writes: Callable[[Any], None], slot_marker: str
    ) -> tuple[Any, Confirmation]:
        """Run shared.durable's write and WAIT with this engine's policy; the first reply.

        One Redis: one pipeline, with the PUBLISH marker. A cluster: one pipeline on the master
        owning `slot_marker`'s slot (every write queued must lie in that slot), whose SET is
        the marker.
        """
        if is_cluster(self.redis):
            writes, confirmation = durable.write_then_wait_in_slot(
                self.redis,  # type: ignore[arg-type]
                queue_writes,
                op=op,
                replicas=self.policy.wait_replicas,
                timeout_ms=self.policy.wait_timeout_ms,
                marker_key=slot_marker,
            )
        else:
            writes, confirmation = durable.write_then_wait(
                self.redis,
                queue_writes,
                op=op,
                replicas=self.policy.wait_replicas,
                timeout_ms=self.policy.wait_timeout_ms,
                marker=self.keys.durable_marker,
            )
        return (writes[0] if writes else None), confirmation

    def _confirm_other_masters(
        self, op: str, confirmation: Confirmation, written: Sequence[str], markers: Sequence[str]
    ) -> Confirmation:
        """On a cluster, WAIT also on the masters of `markers`' slots that own none of the
        `written` ones' (a marker and WAIT each, one master after another); return the weakest
        confirmation of all. One Redis: `confirmation` (its marker covered every write).

        An idempotency key lies in the global slot, often on another master than its job's
        queue: a key lost at that master's failover would let a resend make a second job.
        """
        if not is_cluster(self.redis):
            return confirmation
        cluster: Any = self.redis
        seen = {cluster.get_node_from_key(marker).name for marker in written}
        for marker in markers:
            node = cluster.get_node_from_key(marker).name
            if node in seen:
                continue  # that master's marker and WAIT came after this write too
            seen.add(node)
            _, other = self._write_then_wait(op, lambda pipe: None, marker)
            confirmation = durable.weakest(confirmation, other)
        return confirmation

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
        """
        duplicate = False
        if idempotency_key is not None:
            job_id, queue, duplicate = self._reserve(request, job_id, idempotency_key)
            request = (
                request if queue == request.queue else dataclasses.replace(request, queue=queue)
            )
        keys, args = self._enqueue_call(request, job_id, now_ms, traceparent)
        if actor is not None:
            # The cap is then always given ('0' when off): the actor comes after it.
            args = [*args[:11], self.policy.events_cap, ACTOR_CODES[actor]]
        # Durable mode: the marker before WAIT also covers the key reserve.lua wrote, and a
        # repeat that writes nothing (shared.durable).
        reply, confirmation = self._call_durable("enqueue", keys, args, request.queue)
        result = enqueue_result(reply)
        if result.status is JobState.SCHEDULED:
            self.note_due([(request, result)])
        if confirmation is not None:  # durable mode only: nothing more on the hot path when off
            if idempotency_key is not None:
                written = [self.q(request.queue).slot_marker]
                confirmation = self._confirm_other_masters(
                    "enqueue", confirmation, written, [self.keys.global_slot_marker]
                )
            result = dataclasses.replace(result, confirmation=confirmation)
        # The key named an earlier request's job: an answer about that job (200), even when
        # this call had to create it (deleted since, or never created: its producer died
        # between the two calls), under the same id, so racing repeats create one job and
        # only the request that reserved the key answers "created".
        return dataclasses.replace(result, created=False) if duplicate else result

    def _reserve(
        self, request: EnqueueRequest, job_id: str, idempotency_key: str
    ) -> tuple[str, str, bool]:
        """Tie the key to this request's job; return (job id, queue, whether it was earlier)."""
        digest = hashlib.sha256(request.canonical().encode()).hexdigest()
        reply = self._call(
            "reserve",
            [self.keys.idempotency(idempotency_key)],
            [digest, job_id, request.queue, self.policy.idempotency_ttl_ms],
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

    def _confirm_batch(
        self, requests: Sequence[tuple[EnqueueRequest, str]], keyed: bool
    ) -> Confirmation:
        """WAIT after a batch: one marker and WAIT on one Redis; on a cluster, one on each master
        the batch wrote (its queues' slots, and the global slot's for an idempotency key)."""
        queues = dict.fromkeys(request.queue for request, _ in requests)
        markers = [self.q(queue).slot_marker for queue in queues]
        if keyed:
            markers.append(self.keys.global_slot_marker)
        _, confirmation = self._write_then_wait("enqueue_batch", lambda pipe: None, markers[0])
        return self._confirm_other_masters("enqueue_batch", confirmation, markers[:1], markers[1:])

    def _reserve_batch(
        self, requests: Sequence[tuple[EnqueueRequest, str]], idempotency_key: str
    ) -> tuple[list[tuple[EnqueueRequest, str]], bool]:
        """Tie the key to this batch's jobs; return the batch under the ids the key names (this
        call's, or an earlier same batch's) and whether they were an earlier call's."""
        jobs = ",".join(f"{job_id} {request.queue}" for request, job_id in requests)
        reply = self._call(
            "reserve_batch",
            [self.keys.idempotency(idempotency_key)],
            [
                batch_digest([request for request, _ in requests]),
                jobs,
                self.policy.idempotency_ttl_ms,
            ],
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
        the cache emptied (SCRIPT FLUSH, restart, failover) before its EXEC, so the scripts are
        loaded and it runs once more (execute_loaded). On a cluster the EVALSHAs go bare (a
        cluster pipeline loads no scripts); on one Redis the pipeline checks them first.
        """
        cluster = is_cluster(self.redis)
        piped = self._piped_bare if cluster else self._piped
        groups: dict[str, list[int]] = {}
        for index, (request, _) in enumerate(requests):
            groups.setdefault(request.queue if cluster else "", []).append(index)
        results: list[EnqueueResult | None] = [None] * len(requests)
        for indexes in groups.values():

            def transaction(indexes: list[int] = indexes) -> Any:
                pipe = self.redis.pipeline(transaction=True)
                for index in indexes:
                    request, job_id = requests[index]
                    keys, args = self._enqueue_call(request, job_id, now_ms, traceparent)
                    piped(pipe, "enqueue", keys, args)
                return pipe

            for index, reply in zip(indexes, self.execute_loaded(transaction), strict=True):
                results[index] = enqueue_result(reply)
        done = [result for result in results if result is not None]
        self.note_due(
            [
                (request, result)
                for (request, _), result in zip(requests, done, strict=True)
                if result.status is JobState.SCHEDULED
            ]
        )
        return done

    def _enqueue_call(
        self,
        request: EnqueueRequest,
        job_id: str,
        now_ms: int | None,
        traceparent: str | None = None,
    ) -> tuple[list[str], list[Any]]:
        k = self.q(request.queue)
        keys = [
            k.job(job_id),
            k.pending,
            k.pending_since,
            k.seq,
            k.wake,
            k.scheduled,
            *self._events_key(k),
        ]
        args = [
            job_id,
            request.type,
            request.payload_json,
            request.priority,
            request.max_retries,
            "" if request.scheduled_at_ms is None else request.scheduled_at_ms,
            "" if request.delay_ms is None else request.delay_ms,
            "" if request.timeout is None else repr(request.timeout),
            self.policy.wake_cap,
            _now(now_ms),
            traceparent or "",
            *self._events_cap(),
        ]
        return keys, args

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
        request_id = request_id or new_request_id()
        reply = self._call(
            "claim",
            [
                k.pending,
                k.pending_since,
                k.processing,
                k.last_claim(worker_id),
                k.wake,
                k.paused,
                *self._limit_keys(k),
                *self._events_key(k),
            ],
            [
                k.job_prefix,
                worker_id,
                self.policy.lease_ms,
                request_id,
                _now(now_ms),
                runnable_arg(runnable),
                self.policy.wake_cap,
                *self._events_cap(),
            ],
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
        reply = self._call(
            "renew",
            [k.processing, *(k.job(job_id) for job_id, _ in leases)],
            [self.policy.lease_ms, _now(now_ms), *(token for _, token in leases)],
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
        reply, confirmation = self._call_durable(
            "complete",
            [
                k.job(job_id),
                k.processing,
                k.completed,
                k.pending,
                k.pending_since,
                k.wake,
                k.paused,
                *self._limit_keys(k),
                *self._events_key(k),
            ],
            [
                token,
                result_json,
                _now(now_ms),
                k.job_prefix,
                worker,
                p.lease_ms,
                runnable_arg(runnable),
                p.wake_cap,
                *self._events_cap(),
            ],
            queue,
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
        reply, confirmation = self._call_durable(
            "fail",
            [
                k.job(job_id),
                k.processing,
                k.retrying,
                k.dead,
                k.failures,
                k.canceled,
                k.running,
                k.held,
                k.pending,
                k.wake,
                k.held_order,
                *self._events_key(k),
            ],
            [
                token,
                error,
                p.retry_base_ms,
                p.retry_max_ms,
                p.retry_jitter,
                random.random(),
                "1" if permanent else "0",
                p.dlq_max_age_ms,
                _now(now_ms),
                cap_traceback(traceback),
                ACTOR_CODES[actor],
                self._finished_ttl_ms(),
                p.wake_cap,
                *self._events_cap(),
            ],
            queue,
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

    def promote(
        self, *, queue: str = DEFAULT_QUEUE, limit: int | None = None, now_ms: int | None = None
    ) -> PromoteResult:
        """Make one queue's due scheduled and retrying jobs claimable."""
        k = self.q(queue)
        reply = self._call(
            "promote",
            [
                k.scheduled,
                k.retrying,
                k.pending,
                k.pending_since,
                k.seq,
                k.wake,
                k.reply(new_request_id()),
                *self._events_key(k),
            ],
            [
                k.job_prefix,
                limit or self.policy.batch_limit,
                self.policy.wake_cap,
                _now(now_ms),
                *self._events_cap(),
            ],
        )
        return PromoteResult(
            scheduled=ids(reply[0]),
            retrying=ids(reply[1]),
            scheduled_lateness_ms=[int(v) for v in reply[2]],
            retrying_lateness_ms=[int(v) for v in reply[3]],
            scheduled_types=ids(reply[4]),
            retrying_types=ids(reply[5]),
        )

    def note_due(self, scheduled: Sequence[tuple[EnqueueRequest, EnqueueResult]]) -> None:
        """Index the queues of jobs just scheduled by when they are due: one ZADD LT in the
        global slot, after the scripts that scheduled them (none when there are none).

        The second call of a delayed enqueue (a script writes one slot only; docs/WORKERD.md,
        "The scheduler at scale of names"): LT lowers an entry or adds a missing one, never
        delays one. The jobs exist once their script ran, so a note that fails (the global
        slot's master unreachable) is logged, not raised: an error would tell the producer to
        send them again. workerd/sweep.py indexes them, as those of a producer that died here.
        """
        earliest: dict[str, int] = {}
        for request, result in scheduled:
            at = request.scheduled_at_for(result.created_at_ms)
            if at is not None:
                earliest[request.queue] = min(at, earliest.get(request.queue, at))
        if not earliest:
            return
        try:
            self.redis.zadd(self.keys.due, earliest, lt=True)
        except redis.RedisError as exc:
            log.warning(
                "due_note_failed", extra={"queues": sorted(earliest), "error": error_text(exc)}
            )

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
            self.redis.zadd(self.keys.due, found, lt=True)
        return found

    def set_limits(
        self, queue: str, limits_json: str, *, expected: str | None = None
    ) -> tuple[int, int] | None:
        """Replace a queue's limits (compact JSON, shared.limits), or clear them with "".

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
        reply = self._call(
            "set_limits",
            [
                k.limits,
                k.running,
                k.held,
                k.processing,
                k.pending,
                k.wake,
                k.gates,
                k.buckets,
                k.held_order,
            ],
            [
                limits_json,
                k.job_prefix,
                self.policy.wake_cap,
                "*" if expected is None else expected,
            ],
        )
        if reply[0] == Code.CONFLICT:
            return None
        if not limits_json:
            self.redis.srem(self.keys.limited, queue)
        return int(reply[1]), int(reply[2])

    def open_gates(self, *, queue: str = DEFAULT_QUEUE, now_ms: int | None = None) -> int:
        """Let jobs held by a rate limit go where tokens are back; return how many went."""
        k = self.q(queue)
        return int(
            self._call(
                "open_gates",
                [k.gates, k.limits, k.buckets, k.held, k.pending, k.wake, k.held_order],
                [_now(now_ms), self.policy.wake_cap, self.policy.batch_limit],
            )
        )

    def _loss_keys(self, queue: str) -> list[str]:
        """Return the keys of a job losing its worker (lose_worker in common.lua), in order."""
        k = self.q(queue)
        return [k.processing, k.pending, k.pending_since, k.seq, k.wake, k.dead]

    def recover(
        self, *, queue: str = DEFAULT_QUEUE, limit: int | None = None, now_ms: int | None = None
    ) -> RecoverResult:
        """Requeue one queue's jobs whose lease expired (or dead past the recovery cap)."""
        k, p = self.q(queue), self.policy
        reply = self._call(
            "recover",
            [
                *self._loss_keys(queue),
                k.reply(new_request_id()),
                k.canceled,
                k.running,
                k.held,
                k.held_order,
                *self._events_key(k),
            ],
            [
                k.job_prefix,
                limit or p.batch_limit,
                p.max_recoveries,
                p.dlq_max_age_ms,
                p.wake_cap,
                _now(now_ms),
                self._finished_ttl_ms(),
                *self._events_cap(),
            ],
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
        reply = self._call(
            "release",
            [
                k.job(job_id),
                k.processing,
                k.pending,
                k.pending_since,
                k.seq,
                k.wake,
                k.dead,
                k.canceled,
                k.running,
                k.held,
                k.held_order,
                *self._events_key(k),
            ],
            [
                token,
                _loss_mode(drained, canceling),
                p.max_recoveries,
                p.dlq_max_age_ms,
                p.wake_cap,
                new_request_id(),
                _now(now_ms),
                ACTOR_CODES[actor],
                self._finished_ttl_ms(),
                *self._events_cap(),
            ],
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
        reply = self._call(
            "release_worker",
            [
                *self._loss_keys(queue),
                k.reply(new_request_id()),
                k.canceled,
                k.running,
                k.held,
                k.held_order,
                *self._events_key(k),
            ],
            [
                k.job_prefix,
                worker_id,
                mode,
                p.max_recoveries,
                p.dlq_max_age_ms,
                p.wake_cap,
                _now(now_ms),
                self._finished_ttl_ms(),
                *self._events_cap(),
            ],
        )
        return [
            Released(Code(code), text(jid) or "", text(t) or "", queue) for code, jid, t in reply
        ]

    def replay(self, job_id: str, *, queue: str = DEFAULT_QUEUE, now_ms: int | None = None) -> Job:
        """Return a dead job to pending with attempts 0; raise JobNotFound or WrongState."""
        reply = self._call("replay", *self._replay_call(job_id, queue, new_request_id(), now_ms))
        return job_from_flat(checked(reply)[1], queue)

    def _replay_call(
        self, job_id: str, queue: str, request_id: str, now_ms: int | None
    ) -> tuple[list[str], list[Any]]:
        k = self.q(queue)
        keys = [k.job(job_id), k.dead, k.pending, k.pending_since, k.seq, k.wake]
        keys += self._events_key(k)
        return keys, [request_id, self.policy.wake_cap, _now(now_ms), *self._events_cap()]

    def replay_each(
        self, jobs: Sequence[tuple[str, str]], *, now_ms: int | None = None
    ) -> list[Job | EngineError]:
        """Replay several dead jobs, (id, queue) each, in one round trip: replay.lua per job.

        Each answers alone: the job, or the JobNotFound or WrongState that replay would raise.
        """
        calls = [self._replay_call(jid, q, new_request_id(), now_ms) for jid, q in jobs]
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
        reply = self._call(
            "cancel",
            [
                k.job(job_id),
                k.pending,
                k.pending_since,
                k.scheduled,
                k.retrying,
                k.canceled,
                k.held,
                k.held_order,
                *self._events_key(k),
            ],
            [
                self._finished_ttl_ms(),
                _now(now_ms),
                new_request_id(),
                requester(by),
                *self._events_cap(),
            ],
        )
        checked(reply)
        return CancelResult(job_from_flat(reply[1], queue), changed=reply[0] == Code.DONE)

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
        reply, confirmation = self._call_durable(
            "cancel_running",
            [
                k.job(job_id),
                k.processing,
                k.canceled,
                k.running,
                k.held,
                k.held_order,
                k.pending,
                k.wake,
                *self._events_key(k),
            ],
            [
                token,
                stopped,
                ACTOR_CODES[actor],
                self._finished_ttl_ms(),
                _now(now_ms),
                self.policy.wake_cap,
                *self._events_cap(),
            ],
            queue,
        )
        code = Code(reply[0])
        detail = text(reply[1]) if len(reply) > 1 else None
        if code is Code.DONE:
            return AckResult(code, job_type=detail, confirmation=confirmation)
        return AckResult(code, detail)

    def purge(self, job_id: str, *, queue: str = DEFAULT_QUEUE) -> str:
        """Delete a dead job and return its type; raise JobNotFound or WrongState."""
        reply = self._call("purge", *self._purge_call(job_id, queue, new_request_id()))
        return text(checked(reply)[1]) or ""

    def _purge_call(self, job_id: str, queue: str, request_id: str) -> tuple[list[str], list[Any]]:
        k = self.q(queue)
        keys = [k.job(job_id), k.dead, k.tombstone(job_id), *self._events_key(k)]
        return keys, [request_id, TOMBSTONE_TTL_MS, *self._events_cap()]

    def purge_each(self, jobs: Sequence[tuple[str, str]]) -> list[str | EngineError]:
        """Delete several dead jobs, (id, queue) each, in one round trip: purge.lua per job.

        Each answers alone: the type it deleted, or the JobNotFound or WrongState that purge
        would raise.
        """
        replies = self._each(
            "purge", [self._purge_call(jid, q, new_request_id()) for jid, q in jobs]
        )
        return [_or_error(reply, lambda r: text(r[1]) or "") for reply in replies]

    def _each(self, name: str, calls: Sequence[tuple[list[str], list[Any]]]) -> list[Any]:
        """Run one script per (keys, args) on one pipeline (not a transaction: each call stays
        short, other clients run between them), replies in order.

        Bare EVALSHAs (no SCRIPT EXISTS round trip first): each call carries its request id, so
        if Redis lost the scripts (NOSCRIPT; the calls before it may have run) execute_loaded
        runs the pipeline once more with the same ids, and a script answers a call it already
        made as it did the first time.
        """

        def pipeline() -> Any:
            pipe = self.redis.pipeline(transaction=False)
            for keys, args in calls:
                self._piped_bare(pipe, name, keys, args)
            return pipe

        return self.execute_loaded(pipeline)

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
            reply = self._call(
                "trim",
                [
                    k.completed,
                    k.canceled,
                    k.dead,
                    k.reply(new_request_id()),
                    k.failures,
                    k.throughput,
                ],
                [
                    k.job_prefix,
                    p.finished_retention_ms,
                    p.dlq_max_age_ms,
                    -(-p.dlq_max_jobs // share),
                    limit,
                    _now(now_ms),
                    -(-p.finished_max_jobs // share),
                ],
            )
            counts = [int(v) for v in reply]
            total = TrimResult(
                *(a + b for a, b in zip(dataclasses.astuple(total), counts, strict=True))
            )
            if max(counts) < limit:
                break
        return total

    def heartbeat(
        self,
        worker_id: str,
        fields: dict[str, str | int],
        ttl_ms: int,
        *,
        leaving: bool = False,
        quiet: bool = False,
        quiet_by_signal: bool = False,
        now_ms: int | None = None,
    ) -> HostBeat:
        """Record a live workerd host (or its departure); return live hosts and its quiet state.

        `quiet` is the supervisor's state; a request quiet_host left in the record since the
        previous heartbeat replaces it, unless `quiet_by_signal` (a signal set it since then).
        """
        k = self.keys
        pairs = [item for pair in fields.items() for item in pair]
        args = [worker_id, ttl_ms, "1" if leaving else "0", _now(now_ms)]
        args += ["1" if quiet else "0", "1" if quiet_by_signal else "0", self.policy.events_cap]
        live, state = self._call(
            "heartbeat", [k.workers, k.worker(worker_id), k.fleet_events], [*args, *pairs]
        )
        return HostBeat(int(live), text(state) == "1")

    def quiet_host(self, name: str, quiet: bool) -> bool | None:
        """Ask a workerd host to claim nothing more (or again); raise HostNotFound.

        Returns the quiet state the host applied last (None before its first report of one):
        the host applies the request at its next registry heartbeat.
        """
        reply = self._call("quiet_host", [self.keys.worker(name)], ["1" if quiet else "0"])
        if reply[0] == Code.NOT_FOUND:
            raise HostNotFound(name)
        applied = text(reply[1]) if len(reply) > 1 else None
        return None if applied is None else applied == "1"

    def pause_queue(self, queue: str, *, now_ms: int | None = None) -> QueuePause:
        """Pause a queue: no claim takes from it until resume_queue (jobs still arrive)."""
        k = self.q(queue)
        reply = self._call(
            "pause_queue", [k.paused, *self._events_key(k)], [_now(now_ms), *self._events_cap()]
        )
        return QueuePause(since_ms=int(reply[1]), changed=reply[2] == 1)

    def resume_queue(self, queue: str) -> bool:
        """Let workers claim from a queue again; return whether it was paused."""
        k = self.q(queue)
        reply = self._call(
            "resume_queue",
            [k.paused, k.pending, k.wake, *self._events_key(k)],
            [self.policy.wake_cap, *self._events_cap()],
        )
        return reply[1] == 1

    def advance_schedule(
        self, name: str, tick_ms: int, job_id: str | None, *, missed: int = 0, jobs: int = 0
    ) -> bool:
        """Move a schedule's last tick up to `tick_ms` (never back); return whether it moved.

        `job_id`: the job enqueued for that tick (None: none was); `missed`: due ticks that got
        no job; `jobs`: jobs enqueued for the ticks up to it. The counts are added only by the
        call that moves it (docs/SCHEDULES.md).
        """
        args = [tick_ms, job_id or "", missed, jobs]
        reply = self._call("advance_schedule", [self.keys.schedule(name)], args)
        return reply[1] == 1

    def pause_schedule(self, name: str, *, now_ms: int | None = None) -> QueuePause:
        """Pause a published schedule: its ticks pass without jobs; raise ScheduleNotFound."""
        keys = [self.keys.schedules, self.keys.schedule(name)]
        reply = self._call("pause_schedule", keys, [name, _now(now_ms)])
        if reply[0] == Code.NOT_FOUND:
            raise ScheduleNotFound(name)
        return QueuePause(since_ms=int(reply[1]), changed=reply[2] == 1)

    def resume_schedule(self, name: str, *, now_ms: int | None = None) -> bool:
        """Resume a schedule from its next tick; return whether it was paused."""
        keys = [self.keys.schedules, self.keys.schedule(name)]
        reply = self._call("resume_schedule", keys, [name, _now(now_ms)])
        if reply[0] == Code.NOT_FOUND:
            raise ScheduleNotFound(name)
        return reply[1] == 1

    def publish_schedules(self, definitions: Sequence[tuple[str, str]]) -> int:
        """Replace the published schedule definitions with these (name, JSON) pairs."""
        args = [item for pair in definitions for item in pair]
        return int(self._call("publish_schedules", [self.keys.schedules], args)[1])

    def register_queue(self, queue: str) -> None:
        """Add a queue to the list of queues and its job ids' tag to the tag map (shared.job_ids).

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
        shared.queue_removal orders this call with the list's (docs/QUEUES.md).
        """
        k = self.q(queue)
        keys = [k.pending, k.held, k.scheduled, k.retrying, k.processing, k.dead, k.paused]
        keys += [k.limits, k.completed, k.canceled, k.seq, k.pending_since, k.wake, k.failures]
        keys += [k.events, k.throughput, k.running, k.held_order, k.buckets, k.gates]
        keys.append(k.slot_marker)
        reply = self._call("delete_queue", keys, [k.job_prefix, "1" if delete else "0"])
        if Code(reply[0]) is Code.DONE:
            return None
        return [int(n) for n in reply[1:]]

    def queue_names(self) -> list[str]:
        """Return every queue a job was enqueued under (the default queue always), sorted."""
        names = {text(name) or "" for name in self.redis.smembers(self.keys.queues)}
        return sorted(names | {DEFAULT_QUEUE})

    def stats(
        self, queues: Sequence[str] | None = None, *, now_ms: int | None = None
    ) -> tuple[QueueCounts, WorkerCounts]:
        """Return jobs per state (all queues, and each) and fleet-wide worker counts.

        One pipelined round trip (one read per queue, one of the registry) after reading the
        list of queues, unless `queues` names them. Each queue's counts also say whether it is
        paused and what it completed and failed in the last minute (queue_stats.lua).
        """
        names = list(queues) if queues is not None else self.queue_names()
        # Reads only, so repeatable: bare EVALSHAs, no SCRIPT EXISTS round trip before them.
        replies = self.execute_loaded(lambda: self._stats_pipeline(names, now_ms))
        *per_queue, (hosts, live, busy, quiet) = replies
        by_queue = {
            name: _queue_counts(reply) for name, reply in zip(names, per_queue, strict=True)
        }
        return QueueCounts.combined(by_queue), WorkerCounts(hosts, live, busy, quiet)

    def _stats_pipeline(self, names: Sequence[str], now_ms: int | None) -> Any:
        pipe = self.redis.pipeline(transaction=False)
        for name in names:
            k = self.q(name)
            keys = [*(k.state_index(state) for state in JobState), k.pending_since]
            keys += [k.paused, k.failures, k.held]
            self._piped_bare(pipe, "queue_stats", keys, [_now(now_ms)])
        self._piped_bare(pipe, "fleet", [self.keys.workers], [self.keys.worker_prefix])
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

        shared.listing sends one per queue on one pipeline (run by execute_loaded), parses the
        replies and merges them. `held`: read the pending jobs a limit holds (``held_order``,
        ordered as ``pending``) instead of the index.
        """
        k = self.q(queue)
        score, member = ("", "") if after is None else (str(after[0]), after[1])
        args = [k.job_prefix, order, score, member, limit, budget, job_type or ""]
        index = k.held_order if held else k.state_index(state)
        self._piped_bare(pipe, "list_page", [index], args)

    def throughput(self, pipe: Any, *, queue: str, minutes: int, now_ms: int | None) -> None:
        """Queue a read of one queue's completions and failures per minute (throughput.lua).

        shared.throughput sends one per queue on one pipeline (run by execute_loaded).
        """
        k = self.q(queue)
        keys = [k.throughput, k.completed, k.failures]
        self._piped_bare(pipe, "throughput", keys, [_now(now_ms), minutes])

    def _piped_bare(self, pipe: Any, name: str, keys: Sequence[str], args: Sequence[Any]) -> None:
        """Queue a bare EVALSHA on a pipeline: redis-py then sends no SCRIPT EXISTS round trip
        first. Run the pipeline with execute_loaded, which answers NOSCRIPT.

        Sent as a plain command: redis-py's cluster pipeline refuses its ``evalsha`` method
        (it cannot load scripts), yet routes the command by its first key like any other.
        """
        pipe.execute_command("EVALSHA", self._scripts[name].sha, len(keys), *keys, *args)

    def execute_loaded(self, build: Callable[[], Any]) -> list[Any]:
        """Execute the pipeline `build()` makes; if Redis lost the scripts (a restart, a
        failover), load them and execute a new one once more.

        Only for pipelines of calls that change nothing when repeated: with NOSCRIPT on one
        call, the calls before it in a non-transaction pipeline did run.
        """
        try:
            return build().execute()
        except redis.exceptions.NoScriptError:
            self.load()
            return build().execute()

    def _finished_ttl_ms(self) -> int:
        return self.policy.finished_retention_ms + HASH_TTL_MARGIN_MS


def _loss_mode(drained: bool, canceling: bool) -> str:
    """Return release.lua's and release_worker.lua's mode argument."""
    if canceling:
        return "cancel"
    return "drain" if drained else "crash"


# What a cancel request keeps of who asked: history's fields are '|'-separated lines.
_REQUESTER_UNSAFE = re.compile(r"[|\x00-\x1f\x7f]+")
REQUESTER_LIMIT = 64


def requester(by: str) -> str:
    """Return who asked for a cancel as a running job keeps it: no '|' nor control character
    (history's separators), at most REQUESTER_LIMIT bytes of UTF-8, spaces trimmed."""
    cleaned = _REQUESTER_UNSAFE.sub(" ", by).strip()
    data = cleaned.encode()[:REQUESTER_LIMIT]
    return data.decode(errors="ignore").strip()


def _claimed(reply: list[Any], worker_id: str, queue: str) -> Job | NotRunnable | None:
    """Return what a claim reply (claim.lua's, or complete.lua's claim part) holds."""
    if reply[0] == Code.NOT_RUNNABLE:
        return NotRunnable(queue, text(reply[1]) or "")
    if reply[0] == Code.DONE and len(reply) > 1:
        return claimed_job(reply[1:], worker_id, queue)
    return None


def _or_error(reply: list[Any], value: Callable[[list[Any]], Any]) -> Any:
    """Return `value(reply)`, or the EngineError a negative code stands for (not raised)."""
    try:
        return value(checked(reply))
    except EngineError as exc:
        return exc


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
