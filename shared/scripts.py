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
"""

from __future__ import annotations

import hashlib
import random
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import astuple, dataclass, field
from enum import IntEnum
from functools import cache
from typing import Any

import redis

from shared.jobs import EnqueueRequest, Job, JobState, cap_traceback
from shared.keys import Keys
from shared.lua_source import assemble
from shared.queries import QueueCounts, WorkerCounts

SCRIPT_NAMES = (
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
    "purge",
    "trim",
    "heartbeat",
    "stats",
)
# Hashes of canceled jobs outlive their index entry by this much: trim.lua deletes both at
# retention; the TTL only matters if trimming stopped (no scheduler running). Completed jobs
# have no TTL (bounded by trim's count cap alone: an expires entry per job costs memory).
HASH_TTL_MARGIN_MS = 5 * 60 * 1000
TOMBSTONE_TTL_MS = 60 * 1000
# Calls of trim.lua per Scripts.trim at most: with the default batch of 1,000, the scheduler's
# once-a-second trim keeps up with up to 100,000 finished jobs a second.
TRIM_ROUNDS = 100


class Code(IntEnum):
    """Return codes of the scripts (mirrors lua/includes/codes.lua)."""

    EMPTY = 0
    DONE = 1
    DUPLICATE = 2
    RETRYING = 3
    DEAD = 4
    NOT_FOUND = -1
    WRONG_STATE = -2
    STALE_TOKEN = -3
    CONFLICT = -4


class EngineError(Exception):
    """Base of the errors a transition reports to an API caller."""


class JobNotFound(EngineError):
    """No job has that id (never existed, or its retention passed)."""


class WrongState(EngineError):
    """The job is not in a state the transition starts from."""

    def __init__(self, status: str) -> None:
        self.status = status
        super().__init__(f"job is {status}")


class IdempotencyConflict(EngineError):
    """The idempotency key already names a job created by a different request."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"idempotency key already used for job {job_id} with a different body")


@dataclass(frozen=True)
class Policy:
    """Engine parameters, in the units the scripts use (milliseconds and counts)."""

    lease_ms: int = 30_000
    retry_base_ms: int = 2_000
    retry_max_ms: int = 3_600_000
    retry_jitter: float = 0.0
    max_recoveries: int = 5
    finished_retention_ms: int = 86_400_000
    dlq_max_age_ms: int = 7 * 86_400_000
    dlq_max_jobs: int = 10_000
    finished_max_jobs: int = 100_000
    idempotency_ttl_ms: int = 86_400_000
    wake_cap: int = 1_000
    batch_limit: int = 1_000

    @classmethod
    def from_settings(cls, settings: Any) -> Policy:
        """Build a Policy from shared.config.Settings (durations there are seconds)."""

        def ms(seconds: float) -> int:
            return round(seconds * 1000)

        return cls(
            lease_ms=ms(settings.visibility_timeout),
            retry_base_ms=ms(settings.retry_base_delay),
            retry_max_ms=ms(settings.retry_max_delay),
            retry_jitter=settings.retry_jitter,
            max_recoveries=settings.max_recoveries,
            finished_retention_ms=ms(settings.finished_retention),
            dlq_max_age_ms=ms(settings.dlq_max_age),
            dlq_max_jobs=settings.dlq_max_jobs,
            finished_max_jobs=settings.finished_max_jobs,
            idempotency_ttl_ms=ms(settings.idempotency_ttl),
        )


@dataclass(frozen=True)
class EnqueueResult:
    """What enqueue did: created a job, or found the one an idempotency key names."""

    job_id: str
    status: JobState
    created: bool
    created_at_ms: int


@dataclass(frozen=True)
class FailResult:
    """What fail did: RETRYING (with next_retry_at), DEAD, NOT_FOUND or STALE_TOKEN.

    RETRYING and DEAD carry the job's type and the attempt that failed (what a caller logs and
    counts); STALE_TOKEN carries the job's current status.
    """

    code: Code
    next_retry_at: int | None = None
    status: str | None = None
    job_type: str | None = field(default=None, compare=False)
    attempt: int | None = field(default=None, compare=False)


@dataclass(frozen=True)
class AckResult:
    """What a worker-side write did: DONE, DEAD, NOT_FOUND or STALE_TOKEN (with the status)."""

    code: Code
    status: str | None = None
    next_job: Job | None = None
    # release only: the job's type when it was requeued (DONE) or declared dead (DEAD).
    job_type: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Released:
    """One job release_worker gave back: requeued (DONE) or dead past the recovery cap (DEAD)."""

    code: Code
    job_id: str
    job_type: str


@dataclass(frozen=True)
class CancelResult:
    """The canceled job, and whether this call canceled it (False: it already was)."""

    job: Job
    changed: bool


@dataclass(frozen=True)
class PromoteResult:
    """Jobs made claimable by promote, with how late each was (ms past its due time)."""

    scheduled: list[str]
    retrying: list[str]
    scheduled_lateness_ms: list[int]
    retrying_lateness_ms: list[int]
    scheduled_types: list[str] = field(default_factory=list, compare=False)
    retrying_types: list[str] = field(default_factory=list, compare=False)


@dataclass(frozen=True)
class RecoverResult:
    """Jobs whose lease expired: requeued, or dead past the recovery cap."""

    requeued: list[str]
    dead: list[str]
    requeued_types: list[str] = field(default_factory=list, compare=False)
    dead_types: list[str] = field(default_factory=list, compare=False)


@dataclass(frozen=True)
class TrimResult:
    """Jobs forgotten by retention, per index."""

    completed: int
    canceled: int
    dead: int


@cache
def load_source(name: str) -> str:
    """Return a script's Lua as Redis runs it: includes expanded to the definitions it uses."""
    return assemble(name)


def _now(now_ms: int | None) -> str:
    return "" if now_ms is None else str(int(now_ms))


def _text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


# Hash fields a Job carries in ``extra``: when it became claimable (ms; the queue-wait
# histogram reads it from the claim reply, no extra call) and its W3C trace context.
EXTRA_FIELDS = ("eligible_at", "traceparent")
# A claim reply's values, by position (CLAIM_FIELDS in lua/includes/claim.lua, started_at where
# the script read status): what a worker needs to run the job, without the last failure's error
# and traceback, nor what the caller knows (see _claimed).
CLAIM_REPLY_FIELDS = tuple(
    name.encode()
    for name in (
        "id",
        "type",
        "priority",
        "max_retries",
        "attempts",
        "recoveries",
        "payload",
        "created_at",
        "token",
        "scheduled_at",
        "timeout",
        "eligible_at",
        "traceparent",
        "started_at",
    )
)


def _job(flat: Sequence[bytes]) -> Job:
    return _from_fields(dict(zip(flat[::2], flat[1::2], strict=True)))


def _claimed(values: Sequence[bytes | None], worker_id: str) -> Job:
    """Build the Job of a claim reply (values in CLAIM_REPLY_FIELDS order) for `worker_id`.

    A claimed job is processing, held by the worker that claimed it, and last updated when it
    started: the script leaves these out of its reply.
    """
    raw = {
        name: value
        for name, value in zip(CLAIM_REPLY_FIELDS, values, strict=True)
        if value is not None
    }
    raw[b"status"] = b"processing"
    raw[b"updated_at"] = raw[b"started_at"]
    raw[b"worker_id"] = worker_id.encode()
    return _from_fields(raw)


def _from_fields(raw: dict[bytes, bytes]) -> Job:
    job = Job.from_hash(raw)
    for name in EXTRA_FIELDS:
        value = raw.get(name.encode())
        if value is not None:
            job.extra[name] = value.decode()
    return job


def _ids(values: Iterable[bytes]) -> list[str]:
    return [v.decode() for v in values]


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

    def _call(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        script = self._scripts[name]
        try:
            return script(keys=keys, args=args)
        except redis.exceptions.NoScriptError:
            # redis-py reloads a missing script and tries once more; the cache emptied again in
            # between (SCRIPT FLUSH, restart, failover). The script did not run: once more.
            return script(keys=keys, args=args)

    def enqueue(
        self,
        request: EnqueueRequest,
        job_id: str,
        *,
        idempotency_key: str | None = None,
        now_ms: int | None = None,
        traceparent: str | None = None,
    ) -> EnqueueResult:
        """Create a job (pending, or scheduled when scheduled_at is in the future)."""
        keys, args = self._enqueue_call(request, job_id, idempotency_key, now_ms, traceparent)
        return _enqueue_result(self._call("enqueue", keys, args))

    def enqueue_many(
        self,
        requests: Sequence[tuple[EnqueueRequest, str]],
        *,
        now_ms: int | None = None,
        traceparent: str | None = None,
    ) -> list[EnqueueResult]:
        """Create several jobs, all or none (one MULTI/EXEC round trip), in the given order."""
        try:
            return self._enqueue_transaction(requests, now_ms, traceparent)
        except redis.exceptions.NoScriptError:
            # The cache emptied (SCRIPT FLUSH, restart, failover) between the pipeline's SCRIPT
            # EXISTS and its EXEC: every EVALSHA failed alike, so nothing was written. Once
            # more: the pipeline loads the script again first.
            return self._enqueue_transaction(requests, now_ms, traceparent)

    def _enqueue_transaction(
        self,
        requests: Sequence[tuple[EnqueueRequest, str]],
        now_ms: int | None,
        traceparent: str | None,
    ) -> list[EnqueueResult]:
        script = self._scripts["enqueue"]
        pipe = self.redis.pipeline(transaction=True)
        for request, job_id in requests:
            keys, args = self._enqueue_call(request, job_id, None, now_ms, traceparent)
            script(keys=keys, args=args, client=pipe)
        return [_enqueue_result(reply) for reply in pipe.execute()]

    def _enqueue_call(
        self,
        request: EnqueueRequest,
        job_id: str,
        idempotency_key: str | None,
        now_ms: int | None,
        traceparent: str | None = None,
    ) -> tuple[list[str], list[Any]]:
        k = self.keys
        digest = ""
        if idempotency_key is not None:
            digest = hashlib.sha256(request.canonical().encode()).hexdigest()
        keys = [
            k.job(job_id),
            k.pending,
            k.pending_since,
            k.seq,
            k.wake,
            k.scheduled,
            k.idempotency(idempotency_key or ""),
        ]
        args = [
            job_id,
            request.type,
            request.payload_json,
            request.priority,
            request.max_retries,
            "" if request.scheduled_at_ms is None else request.scheduled_at_ms,
            "" if request.timeout is None else repr(request.timeout),
            digest,
            self.policy.idempotency_ttl_ms,
            self.policy.wake_cap,
            _now(now_ms),
            k.job_prefix,
            traceparent or "",
        ]
        return keys, args

    def claim(
        self, worker_id: str, *, request_id: str | None = None, now_ms: int | None = None
    ) -> Job | None:
        """Start the best pending job for this worker, or return None when there is none.

        A caller that retries a claim that raised passes the same `request_id` again: if the
        first call did reach Redis, the retry gets the job it claimed instead of a second one.
        """
        k = self.keys
        request_id = request_id or new_request_id()
        reply = self._call(
            "claim",
            [k.pending, k.pending_since, k.processing, k.last_claim(worker_id), k.wake],
            [k.job_prefix, worker_id, self.policy.lease_ms, request_id, _now(now_ms)],
        )
        return _claimed(reply[1:], worker_id) if reply[0] == Code.DONE else None

    def renew(self, leases: Sequence[tuple[str, int]], *, now_ms: int | None = None) -> list[Code]:
        """Extend the leases of (job id, token) pairs; one Code per pair (see renew.lua).

        DONE: extended. WRONG_STATE: already finished by its holder (harmless). STALE_TOKEN or
        NOT_FOUND: the lease was lost and the worker running the job must be stopped.
        """
        if not leases:
            return []
        k = self.keys
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
        now_ms: int | None = None,
    ) -> AckResult:
        """Record success with the job's result (JSON text); optionally claim the next job.

        With `claim_next_for` (a worker id) the worker's next job comes back in
        ``AckResult.next_job`` from the same round trip, as :meth:`claim` would return it; a
        retried call (its reply lost) gets the job the first call claimed, found by the token.
        """
        k, p = self.keys, self.policy
        worker = claim_next_for or ""
        reply = self._call(
            "complete",
            [
                k.job(job_id),
                k.processing,
                k.completed,
                k.pending,
                k.pending_since,
                k.wake,
            ],
            [
                token,
                result_json,
                _now(now_ms),
                k.job_prefix,
                worker,
                p.lease_ms,
            ],
        )
        code = Code(reply[0])
        if code is Code.DONE:
            next_job = _claimed(reply[1:], worker) if len(reply) > 1 else None
            return AckResult(code, next_job=next_job)
        return AckResult(code, _text(reply[1]) if len(reply) > 1 else None)

    def fail(
        self,
        job_id: str,
        token: int,
        error: str,
        *,
        permanent: bool = False,
        traceback: str = "",
        now_ms: int | None = None,
    ) -> FailResult:
        """Record a failed execution: retry after the backoff, or dead when attempts are spent.

        `error` is ``"Type: message"``; `traceback` (a handler's, "" for none) is stored with
        it, cut to shared.jobs.TRACEBACK_LIMIT bytes.
        """
        k, p = self.keys, self.policy
        reply = self._call(
            "fail",
            [k.job(job_id), k.processing, k.retrying, k.dead],
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
            ],
        )
        code = Code(reply[0])
        if code is Code.RETRYING:
            return FailResult(
                code, next_retry_at=int(reply[3]), job_type=_text(reply[1]), attempt=int(reply[2])
            )
        if code is Code.DEAD:
            return FailResult(code, job_type=_text(reply[1]), attempt=int(reply[2]))
        return FailResult(code, status=_text(reply[1]) if len(reply) > 1 else None)

    def promote(self, *, limit: int | None = None, now_ms: int | None = None) -> PromoteResult:
        """Make due scheduled and retrying jobs claimable."""
        k = self.keys
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
            ],
            [k.job_prefix, limit or self.policy.batch_limit, self.policy.wake_cap, _now(now_ms)],
        )
        return PromoteResult(
            scheduled=_ids(reply[0]),
            retrying=_ids(reply[1]),
            scheduled_lateness_ms=[int(v) for v in reply[2]],
            retrying_lateness_ms=[int(v) for v in reply[3]],
            scheduled_types=_ids(reply[4]),
            retrying_types=_ids(reply[5]),
        )

    def _loss_keys(self) -> list[str]:
        """Return the keys of a job losing its worker (lose_worker in common.lua), in order."""
        k = self.keys
        return [k.processing, k.pending, k.pending_since, k.seq, k.wake, k.dead]

    def recover(self, *, limit: int | None = None, now_ms: int | None = None) -> RecoverResult:
        """Requeue jobs whose lease expired (or declare them dead past the recovery cap)."""
        k, p = self.keys, self.policy
        reply = self._call(
            "recover",
            [*self._loss_keys(), k.reply(new_request_id())],
            [
                k.job_prefix,
                limit or p.batch_limit,
                p.max_recoveries,
                p.dlq_max_age_ms,
                p.wake_cap,
                _now(now_ms),
            ],
        )
        return RecoverResult(
            requeued=_ids(reply[0]),
            dead=_ids(reply[1]),
            requeued_types=_ids(reply[2]),
            dead_types=_ids(reply[3]),
        )

    def release(
        self, job_id: str, token: int, *, drained: bool = False, now_ms: int | None = None
    ) -> AckResult:
        """Requeue a job whose worker is gone: a crash counts a recovery, a drain does not."""
        k, p = self.keys, self.policy
        reply = self._call(
            "release",
            [k.job(job_id), k.processing, k.pending, k.pending_since, k.seq, k.wake, k.dead],
            [
                token,
                "drain" if drained else "crash",
                p.max_recoveries,
                p.dlq_max_age_ms,
                p.wake_cap,
                new_request_id(),
                _now(now_ms),
            ],
        )
        code = Code(reply[0])
        detail = _text(reply[1]) if len(reply) > 1 else None
        if code in (Code.DONE, Code.DEAD):
            return AckResult(code, job_type=detail)
        return AckResult(code, detail)

    def release_worker(
        self, worker_id: str, *, drained: bool = False, now_ms: int | None = None
    ) -> list[Released]:
        """Requeue whatever job a dead worker still holds, found by its id (one call).

        For a worker that died holding a job its supervisor never saw (inside a claim, or the
        complete that claims its next job). A crash counts a recovery, a drain does not.
        """
        k, p = self.keys, self.policy
        reply = self._call(
            "release_worker",
            [*self._loss_keys(), k.reply(new_request_id())],
            [
                k.job_prefix,
                worker_id,
                "drain" if drained else "crash",
                p.max_recoveries,
                p.dlq_max_age_ms,
                p.wake_cap,
                _now(now_ms),
            ],
        )
        return [Released(Code(code), _text(jid) or "", _text(t) or "") for code, jid, t in reply]

    def replay(self, job_id: str, *, now_ms: int | None = None) -> Job:
        """Return a dead job to pending with attempts 0; raise JobNotFound or WrongState."""
        k = self.keys
        reply = self._call(
            "replay",
            [k.job(job_id), k.dead, k.pending, k.pending_since, k.seq, k.wake],
            [new_request_id(), self.policy.wake_cap, _now(now_ms)],
        )
        return _job(_checked(reply)[1])

    def cancel(self, job_id: str, *, now_ms: int | None = None) -> CancelResult:
        """Cancel a job that has not started; raise JobNotFound or WrongState."""
        k = self.keys
        reply = self._call(
            "cancel",
            [k.job(job_id), k.pending, k.pending_since, k.scheduled, k.retrying, k.canceled],
            [self._finished_ttl_ms(), _now(now_ms), new_request_id()],
        )
        _checked(reply)
        return CancelResult(_job(reply[1]), changed=reply[0] == Code.DONE)

    def purge(self, job_id: str) -> str:
        """Delete a dead job and return its type; raise JobNotFound or WrongState."""
        k = self.keys
        reply = self._call(
            "purge",
            [k.job(job_id), k.dead, k.tombstone(job_id)],
            [new_request_id(), TOMBSTONE_TTL_MS],
        )
        return _text(_checked(reply)[1]) or ""

    def trim(
        self, *, limit: int | None = None, now_ms: int | None = None, rounds: int = TRIM_ROUNDS
    ) -> TrimResult:
        """Forget finished jobs past retention or their count cap, dead jobs past the DLQ's.

        Calls trim.lua again while a call may have left work (it hit `limit` in an index), at
        most `rounds` times: the scheduler trims once a second, and one call of `limit` would
        let the completed index outgrow its cap when more jobs than that finish each second.
        Each call stays short, so other clients run between them.
        """
        k, p = self.keys, self.policy
        limit = limit or p.batch_limit
        total = TrimResult(0, 0, 0)
        for _ in range(rounds):
            reply = self._call(
                "trim",
                [k.completed, k.canceled, k.dead, k.reply(new_request_id())],
                [
                    k.job_prefix,
                    p.finished_retention_ms,
                    p.dlq_max_age_ms,
                    p.dlq_max_jobs,
                    limit,
                    _now(now_ms),
                    p.finished_max_jobs,
                ],
            )
            counts = [int(v) for v in reply]
            total = TrimResult(*(a + b for a, b in zip(astuple(total), counts, strict=True)))
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
        now_ms: int | None = None,
    ) -> int:
        """Record a live worker (or its departure); return how many workers are live."""
        k = self.keys
        pairs = [item for pair in fields.items() for item in pair]
        return int(
            self._call(
                "heartbeat",
                [k.workers, k.worker(worker_id)],
                [worker_id, ttl_ms, "1" if leaving else "0", _now(now_ms), *pairs],
            )
        )

    def stats(self) -> tuple[QueueCounts, WorkerCounts]:
        """Return jobs per state and fleet-wide worker counts, read in one round trip."""
        k = self.keys
        reply = self._call(
            "stats",
            [*(k.state_index(state) for state in JobState), k.pending_since, k.workers],
            [k.worker_prefix],
        )
        cards, oldest, now, hosts, live, busy = reply
        age = None if oldest < 0 else max(0, now - oldest)
        counts = QueueCounts(dict(zip(JobState, cards, strict=True)), oldest_pending_age_ms=age)
        return counts, WorkerCounts(hosts=hosts, live=live, busy=busy)

    def _finished_ttl_ms(self) -> int:
        return self.policy.finished_retention_ms + HASH_TTL_MARGIN_MS


def _enqueue_result(reply: list[Any]) -> EnqueueResult:
    code = Code(reply[0])
    if code is Code.CONFLICT:
        raise IdempotencyConflict(reply[1].decode())
    return EnqueueResult(
        job_id=reply[1].decode(),
        status=JobState(reply[2].decode()),
        created=code is Code.DONE,
        created_at_ms=int(reply[3]),
    )


def _checked(reply: list[Any]) -> list[Any]:
    """Raise the API error a script's negative code stands for; return the reply otherwise."""
    code = Code(reply[0])
    if code is Code.NOT_FOUND:
        raise JobNotFound()
    if code is Code.WRONG_STATE:
        raise WrongState(reply[1].decode())
    return reply
