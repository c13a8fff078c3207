"""Random sequences of every transition, checked against an independent model of the engine.

The model below is written from the documented behaviour (the README's job rules and the
scripts' header contracts), with plain dicts and no engine code: max_retries is the
maximum number of executions; a retry waits base × 2^(attempts−1), capped; a lost worker gives
its execution back (attempts − 1), counts a recovery (a drain counts none) and the job returns
to its old place and age in line, or is dead past the recovery cap; claims take the highest
priority, then first in line; due scheduled and retrying jobs are promoted together in (due
time, job id) order; retention and the DLQ caps delete index entry and hash together.

Time is simulated: every call passes ``now_ms`` and a rule moves the clock. After every step
the raw Redis keys are read (SCAN, ZRANGE, HGETALL: no engine read helper) and compared with
the model: each job in exactly the index its status names, leases and tokens where they belong,
tokens never going backwards, dead jobs once in the DLQ, counts per state, nothing lost, and
every key either capped or expiring.

A failure is shrunk before it is reported; with this many steps shrinking can take minutes
(Hypothesis stops after five).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import pytest
import redis
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from shared.engine import history
from shared.engine.engine_types import (
    AckResult,
    Code,
    FailResult,
    IdempotencyConflict,
    JobNotFound,
    NotRunnable,
    Policy,
    WrongState,
)
from shared.engine.keys import Keys
from shared.engine.scripts import TRIM_ROUNDS, Scripts
from shared.model.jobs import EnqueueRequest, Job
from tests.support.redis_server import RedisServer

START = 1_700_000_000_000  # the simulated clock's first reading (ms)
LEASE = 1_000
BASE = 100
CAP = 150  # reached on the 2nd attempt: 100 × 2^1 = 200 → 150
RECOVERIES = 2
RETENTION = 5_000
# Dead hashes also get a real TTL of this many ms (PEXPIRE): keep it above any example's
# wall-clock duration, while the simulated clock can still jump past it.
DLQ_AGE = 120_000
DLQ_MAX = 1
WAKE_CAP = 4
BATCH = 3
# Small, so the runs pass it: the events stream is capped (XADD MAXLEN ~, one macro node over).
EVENTS_CAP = 10
POLICY = Policy(
    lease_ms=LEASE,
    retry_base_ms=BASE,
    retry_max_ms=CAP,
    max_recoveries=RECOVERIES,
    finished_retention_ms=RETENTION,
    dlq_max_age_ms=DLQ_AGE,
    dlq_max_jobs=DLQ_MAX,
    wake_cap=WAKE_CAP,
    batch_limit=BATCH,
    events_cap=EVENTS_CAP,
)
KEYS = Keys()
STATES = ("pending", "scheduled", "processing", "retrying", "completed", "dead", "canceled")
FINISHED = ("completed", "canceled", "dead")
EXPIRING = ("canceled", "dead")
WORKERS = ("w1", "w2", "w3")
# The job types each worker runs (None: any): w2 and w3 leave the other type's jobs in place.
RUNS: dict[str, frozenset[str] | None] = {
    "w1": None,
    "w2": frozenset({"email"}),
    "w3": frozenset({"pdf"}),
}
# How the recovery cap's error starts (it says why; "Type: message" like every
# last_error).
LOST_WORKER = "WorkerLost: worker lost"
# History (docs/QUEUES.md, "Job history"): the last 50 transitions; an entry ending an execution
# is dropped with the claim it belongs to.
HISTORY_CAP = 50
ENDS_EXECUTION = ("completed", "retrying", "dead", "recovered", "released")

job_ids = st.uuids(version=4).map(str)
requests = st.builds(
    dict,
    type=st.sampled_from(["email", "pdf"]),
    payload=st.sampled_from(["{}", '{"a":1,"b":2}', '{"b":2,"a":1}', "[1]"]),
    priority=st.sampled_from([-1, 0, 0, 1, 5]),
    max_retries=st.sampled_from([1, 1, 2, 3, 6]),
    # Slots on a 250 ms grid around now: ties in due time are common, and "past" and "now"
    # (slots -1 and 0) mean pending at once.
    slot=st.sampled_from([None, None, None, -1, 0, 1, 2, 2, 4]),
)
idempotency_keys = st.none() | st.sampled_from(["k1", "k2"])
tokens = st.sampled_from(["current"] * 6 + ["stale", "ahead"])
limits = st.sampled_from([None, 1, 2])
# How a worker's turn ends (claim_and_finish). Each example draws one mood: a uniform mix
# rarely drives one job through three crashes or five failures, a crashy or failing run does.
MOODS = {
    "mixed": ["complete", "next", "fail", "permanent", "crash", "drain", "abandon"],
    "failing": ["fail", "fail", "fail", "permanent", "complete"],
    "crashy": ["crash", "crash", "abandon", "abandon", "drain", "complete"],
}


@dataclass
class Request:
    """What a client asked for; two requests are the same when every field means the same."""

    type: str
    payload: str
    priority: int
    max_retries: int
    scheduled_at: int | None

    def same_as(self, other: Request) -> bool:
        mine, theirs = replace(self, payload=""), replace(other, payload="")
        return mine == theirs and json.loads(self.payload) == json.loads(other.payload)


@dataclass
class ModelJob:
    """What the model expects of one job."""

    id: str
    request: Request
    status: str
    created: int
    attempts: int = 0
    recoveries: int = 0
    token: int = 0
    seq: int | None = None  # place in line: pending, and kept while processing
    since: int | None = None  # claimable since (pending; a lost worker keeps it)
    lease: int | None = None  # lease deadline (processing)
    due: int | None = None  # scheduled_at (scheduled) or next retry (retrying)
    finished: int | None = None  # completed, canceled, dead
    started: int | None = None
    worker: str | None = None
    error: str | None = None
    traceback: str | None = None  # the last failure's, if it had one (never a lost worker's)
    result: str | None = None
    cancel_requested: int | None = None  # when a stop of the running job was asked
    # (event, at, attempt, worker, error type, actor), oldest first, and how many were dropped
    history: list[tuple[str, int, int | None, str | None, str | None, str]] = field(
        default_factory=list
    )
    ends: list[bool] = field(default_factory=list)  # per entry: it ends an execution
    dropped: int = 0

    def record(
        self,
        event: str,
        at: int,
        actor: str,
        attempt: int | None = None,
        worker: str | None = None,
        error: str | None = None,
        *,
        ends: bool | None = None,
    ) -> None:
        """Append a transition; an execution's end names the attempt and worker of its claim.

        `ends`: whether it ends an execution, when its name does not tell (canceled: a job
        stopped while running, or withdrawn before it started)."""
        ends = event in ENDS_EXECUTION if ends is None else ends
        if ends:
            attempt, worker = self.attempts, self.worker
        self.history.append((event, at, attempt, worker, error, actor))
        self.ends.append(ends)
        if len(self.history) > HISTORY_CAP:
            del self.history[0], self.ends[0]
            self.dropped += 1
            if self.ends[0]:
                del self.history[0], self.ends[0]
                self.dropped += 1


class Model:
    """The engine's expected behaviour, re-derived from the documented rules with plain data."""

    def __init__(self) -> None:
        self.now = START
        self.jobs: dict[str, ModelJob] = {}
        self.gone: set[str] = set()  # trimmed or purged: legitimately absent
        self.enqueued: set[str] = set()
        self.idem: dict[str, tuple[Request, str]] = {}
        self.seq = 0
        self.wake = 0

    def in_state(self, *states: str) -> list[ModelJob]:
        return sorted((j for j in self.jobs.values() if j.status in states), key=lambda j: j.id)

    # -- shared steps -------------------------------------------------------------------------

    def make_pending(self, job: ModelJob, *, keep_place: bool = False) -> None:
        """Queue a job; back in its old place (a lost worker) it keeps its seq and its age."""
        if not keep_place:
            self.seq += 1
            job.seq, job.since = self.seq, self.now
        job.status, job.lease, job.due = "pending", None, None
        self.hint()

    def hint(self) -> None:
        """Add a wake-up hint; one over the cap trims to half of it (includes/common.lua)."""
        self.wake += 1
        if self.wake > WAKE_CAP:
            self.wake = max(1, WAKE_CAP // 2)

    def make_dead(self, job: ModelJob, error: str, traceback: str | None = None) -> None:
        job.status, job.error, job.finished = "dead", error, self.now
        job.traceback = traceback
        job.seq = job.since = job.lease = job.due = None

    def lose_worker(self, job: ModelJob, *, counts: bool, actor: str) -> str:
        """Fence off a lost worker, give its execution back, requeue in place or bury past cap;
        a job asked to stop ends canceled instead, its execution kept."""
        job.token += 1
        if job.cancel_requested is not None:
            self.end_canceled(job, actor)
            return "canceled"
        if counts and job.recoveries + 1 > RECOVERIES:
            job.record("dead", self.now, actor, error="WorkerLost")
        else:
            job.record("recovered" if counts else "released", self.now, actor)
        job.attempts = max(0, job.attempts - 1)
        if counts:
            job.recoveries += 1
            if job.recoveries > RECOVERIES:
                self.make_dead(job, LOST_WORKER)
                return "dead"
        self.make_pending(job, keep_place=True)
        return "pending"

    def end_canceled(self, job: ModelJob, actor: str) -> None:
        """A running job asked to stop ends canceled (includes/common.lua end_canceled)."""
        job.record("canceled", self.now, actor, ends=True)
        job.status, job.finished = "canceled", self.now
        job.seq = job.since = job.lease = job.due = None

    def forget(self, job_id: str) -> None:
        del self.jobs[job_id]
        self.gone.add(job_id)

    # -- transitions ----------------------------------------------------------------------------

    def enqueue(self, job_id: str, request: Request, key: str | None) -> tuple[str, str, str]:
        """Return (outcome, job id, status): created, repeated, duplicate or conflict.

        A key is reserved (global slot) before the job is created (its queue's slot): it names
        its first request's job for its whole TTL, even once that job is deleted; the same
        request then creates that job again, under the same id.
        """
        if key is not None and key in self.idem:
            prior_request, prior_id = self.idem[key]
            if not prior_request.same_as(request):
                return "conflict", prior_id, ""
            if prior_id != job_id:
                if prior_id not in self.jobs:  # gone: created again, answered as a duplicate
                    self.created(prior_id, request)
                return "duplicate", prior_id, self.jobs[prior_id].status
        elif key is not None:
            self.idem[key] = (request, job_id)
        if job_id in self.jobs:
            return "repeated", job_id, self.jobs[job_id].status
        return "created", job_id, self.created(job_id, request).status

    def created(self, job_id: str, request: Request) -> ModelJob:
        job = ModelJob(job_id, request, "scheduled", created=self.now)
        self.jobs[job_id] = job
        self.gone.discard(job_id)
        self.enqueued.add(job_id)
        if request.scheduled_at is not None and request.scheduled_at > self.now:
            job.due = request.scheduled_at
        else:
            self.make_pending(job)
        job.record("scheduled" if job.due else "enqueued", self.now, "api", attempt=0)
        return job

    def claim(self, worker: str) -> ModelJob | str | None:
        """Return the job claimed, or the type of the best job when the worker does not run it
        (the job stays in place and a wake-up hint is given back), or None."""
        waiting = self.in_state("pending")
        if not waiting:
            self.wake = 0  # nothing to claim: the hints would only wake workers for nothing
            return None
        job = min(waiting, key=lambda j: (-j.request.priority, j.seq))
        runs = RUNS[worker]
        if runs is not None and job.request.type not in runs:
            self.hint()
            return job.request.type
        job.status, job.lease = "processing", self.now + LEASE
        job.token += 1
        job.attempts += 1
        job.started, job.worker = self.now, worker
        job.record("claimed", self.now, "worker", attempt=job.attempts, worker=worker)
        return job

    def renew(self, leases: list[tuple[str, int]]) -> list[Code]:
        """Per lease: extended; lost (not found, or another token); or finished by its holder."""
        codes = []
        for job_id, token in leases:
            job = self.jobs.get(job_id)
            if job is None:
                codes.append(Code.NOT_FOUND)
            elif job.token != token:
                codes.append(Code.STALE_TOKEN)
            elif job.status == "processing":
                job.lease = self.now + LEASE
                codes.append(Code.DONE if job.cancel_requested is None else Code.CANCEL_ASKED)
            else:
                codes.append(Code.WRONG_STATE)
        return codes

    def held_by(self, worker: str) -> ModelJob | None:
        """Return the job a repeated complete gives back: the worker's latest-leased job."""
        held = [j for j in self.in_state("processing") if j.worker == worker]
        return max(held, key=lambda j: (j.lease, j.id), default=None)

    def complete(self, job_id: str, token: int, result: str) -> tuple[Code, str | None]:
        job = self.jobs.get(job_id)
        if job is None:
            return Code.NOT_FOUND, None
        if job.token != token or job.status not in ("processing", "completed"):
            return Code.STALE_TOKEN, job.status
        if job.status == "processing":
            job.status, job.result, job.finished, job.lease = "completed", result, self.now, None
            job.record("completed", self.now, "worker")
        else:
            event("complete: repeated by the token holder")
        return Code.DONE, None

    def fail(
        self, job_id: str, token: int, error: str, traceback: str, permanent: bool
    ) -> FailResult:
        job = self.jobs.get(job_id)
        if job is None:
            return FailResult(Code.NOT_FOUND)
        if job.token != token:
            return FailResult(Code.STALE_TOKEN, status=job.status)
        if job.status == "retrying":  # the same failure reported again
            return FailResult(Code.RETRYING, next_retry_at=job.due)
        if job.status == "dead":
            return FailResult(Code.DEAD)
        if job.status == "canceled":
            return FailResult(Code.CANCELED)
        if job.status != "processing":
            return FailResult(Code.STALE_TOKEN, status=job.status)
        job.lease = None
        if job.cancel_requested is not None:
            event("fail: a job asked to stop ends canceled")
            self.end_canceled(job, "worker")
            return FailResult(Code.CANCELED)
        kind = error.split(":", 1)[0]
        if permanent or job.attempts >= job.request.max_retries:
            job.record("dead", self.now, "worker", error=kind)
            self.make_dead(job, error, traceback or None)
            return FailResult(Code.DEAD)
        job.record("retrying", self.now, "worker", error=kind)
        delay = BASE * 2 ** (job.attempts - 1)
        if delay > CAP:
            event("fail: retry delay capped")
            delay = CAP
        job.status, job.error, job.due = "retrying", error, self.now + delay
        job.traceback = traceback or None
        return FailResult(Code.RETRYING, next_retry_at=job.due)

    def promote(self, limit: int | None) -> tuple[list[str], list[str], list[int], list[int]]:
        """Due jobs of both sets (at most `limit` from each) enter the line by (due, id)."""
        due = []
        for status in ("scheduled", "retrying"):
            ready = sorted((j.due, j.id) for j in self.in_state(status) if j.due <= self.now)
            due += ready[: limit or BATCH]
        if len({at for at, _ in due}) < len(due):
            event("promote: jobs due at the same moment")
        if due != sorted(due):
            event("promote: retrying and scheduled interleave")
        due.sort()
        moved: dict[str, tuple[list[str], list[int]]] = {
            "scheduled": ([], []),
            "retrying": ([], []),
        }
        for at, job_id in due:
            job = self.jobs[job_id]
            ids, lateness = moved[job.status]
            ids.append(job_id)
            lateness.append(self.now - at)
            job.record("promoted", self.now, "scheduler", attempt=job.attempts)
            self.make_pending(job)
        (scheduled, scheduled_late), (retrying, retrying_late) = moved.values()
        return scheduled, retrying, scheduled_late, retrying_late

    def recover(self, limit: int | None) -> tuple[list[str], list[str], list[str]]:
        expired = sorted((j.lease, j.id) for j in self.in_state("processing") if j.lease < self.now)
        found: dict[str, list[str]] = {"pending": [], "dead": [], "canceled": []}
        for _, job_id in expired[: limit or BATCH]:
            outcome = self.lose_worker(self.jobs[job_id], counts=True, actor="scheduler")
            found[outcome].append(job_id)
        return found["pending"], found["dead"], found["canceled"]

    def release(self, job_id: str, token: int, drained: bool) -> AckResult:
        job = self.jobs.get(job_id)
        if job is None:
            return AckResult(Code.NOT_FOUND)
        if job.status != "processing" or job.token != token:
            return AckResult(Code.STALE_TOKEN, job.status)
        job.lease = None
        outcome = self.lose_worker(job, counts=not drained, actor="supervisor")
        codes = {"dead": Code.DEAD, "canceled": Code.CANCELED}
        return AckResult(codes.get(outcome, Code.DONE))

    def replay(self, job_id: str) -> str:
        """Return "" when replayed, else the error the API would give."""
        job = self.jobs.get(job_id)
        if job is None:
            return "not found"
        if job.status != "dead":
            return job.status
        job.attempts = job.recoveries = 0
        job.error = job.traceback = job.result = job.started = job.finished = job.worker = None
        self.make_pending(job)
        job.record("replayed", self.now, "api", attempt=0)
        return ""

    def cancel(self, job_id: str) -> str:
        """Return "canceled" (this call), "already" (a repeat), or the API's refusal."""
        job = self.jobs.get(job_id)
        if job is None:
            return "not found"
        if job.status == "canceled":
            return "already"
        if job.status == "processing":
            if job.cancel_requested is not None:
                return "already"
            job.cancel_requested = self.now
            job.record("cancel_requested", self.now, "api")
            return "requested"
        if job.status not in ("pending", "scheduled", "retrying"):
            return job.status
        job.status, job.finished = "canceled", self.now
        job.seq = job.since = job.due = None
        job.record("canceled", self.now, "api", attempt=job.attempts)
        return "canceled"

    def cancel_running(self, job_id: str, token: int) -> AckResult:
        """End a running job asked to stop, for the holder of its token (cancel_running.lua)."""
        job = self.jobs.get(job_id)
        if job is None:
            return AckResult(Code.NOT_FOUND)
        if job.token != token:
            return AckResult(Code.STALE_TOKEN, job.status)
        if job.status == "canceled":
            return AckResult(Code.DONE)
        if job.status != "processing":
            return AckResult(Code.STALE_TOKEN, job.status)
        if job.cancel_requested is None:
            return AckResult(Code.WRONG_STATE, job.status)
        self.end_canceled(job, "worker")
        return AckResult(Code.DONE)

    def purge(self, job_id: str) -> str:
        job = self.jobs.get(job_id)
        if job is None:
            return "not found"
        if job.status != "dead":
            return job.status
        self.forget(job_id)
        return ""

    def trim(self, limit: int | None) -> tuple[int, int, int]:
        """Rounds of at most `limit` per index, until one leaves nothing (Scripts.trim)."""
        limit = limit or BATCH
        total = (0, 0, 0)
        for _ in range(TRIM_ROUNDS):
            counts = self.trim_once(limit)
            total = (total[0] + counts[0], total[1] + counts[1], total[2] + counts[2])
            if max(counts) < limit:
                break
        return total

    def trim_once(self, limit: int) -> tuple[int, int, int]:
        def oldest(status: str, cutoff: float) -> list[str]:
            ordered = sorted((j.finished, j.id) for j in self.in_state(status))
            return [i for f, i in ordered if f < cutoff][:limit]

        counts = []
        for status, age in (("completed", RETENTION), ("canceled", RETENTION), ("dead", DLQ_AGE)):
            doomed = oldest(status, self.now - age)
            for job_id in doomed:
                self.forget(job_id)
            counts.append(len(doomed))
        excess = len(self.in_state("dead")) - DLQ_MAX
        if excess > 0:
            event("trim: DLQ over its count cap")
            for job_id in oldest("dead", float("inf"))[: min(excess, limit)]:
                self.forget(job_id)
                counts[2] += 1
        return counts[0], counts[1], counts[2]


class EngineMachine(RuleBasedStateMachine):
    """Drives the engine and the model side by side; compares replies and raw Redis."""

    def __init__(self, client: redis.Redis, scripts: Scripts) -> None:
        super().__init__()
        client.flushall()  # the private server of this session: each example starts empty
        self.r = client
        self.scripts = scripts
        self.model = Model()
        self.tokens_seen: dict[str, int] = {}
        self.failures = 0
        self.mood = "mixed"

    # -- helpers --------------------------------------------------------------------------------

    @property
    def now(self) -> int:
        return self.model.now

    def _request(self, fields: dict) -> Request:
        slot = fields["slot"]
        scheduled_at = None if slot is None else self.now - self.now % 250 + slot * 250
        return Request(
            fields["type"],
            fields["payload"],
            fields["priority"],
            fields["max_retries"],
            scheduled_at,
        )

    def _any_job(self) -> bool:
        return bool(self.model.jobs or self.model.gone)

    def _running(self) -> bool:
        return bool(self.model.in_state("processing"))

    def _target(self, data: st.DataObject, *states: str) -> str:
        """Pick a job id: mostly one in `states`, else any known id (present or gone)."""
        preferred = [j.id for j in self.model.in_state(*states)]
        if preferred and data.draw(st.integers(0, 4), label="prefer") > 0:
            return data.draw(st.sampled_from(preferred), label="job")
        return data.draw(st.sampled_from(sorted(self.model.jobs) + sorted(self.model.gone)))

    def _token(self, job_id: str, how: str) -> int:
        job = self.model.jobs.get(job_id)
        current = job.token if job is not None else 1
        return {"current": current, "stale": current - 1, "ahead": current + 1}[how]

    def _enqueue(self, job_id: str, request: Request, key: str | None) -> None:
        outcome, expected_id, status = self.model.enqueue(job_id, request, key)
        try:
            result = self.scripts.enqueue(
                _engine_request(request), job_id, idempotency_key=key, now_ms=self.now
            )
        except IdempotencyConflict as exc:
            assert outcome == "conflict", f"unexpected conflict with {exc.job_id}"
            assert exc.job_id == expected_id
            event("enqueue: idempotency conflict")
            return
        event(f"enqueue: {outcome}")
        assert outcome != "conflict", "a different request under a used key was accepted"
        created = outcome in ("created", "repeated")
        assert (result.job_id, str(result.status), result.created) == (expected_id, status, created)
        assert result.created_at_ms == self.model.jobs[expected_id].created

    @rule(batch=st.lists(st.tuples(job_ids, requests), min_size=1, max_size=4))
    def enqueue_many(self, batch: list[tuple[str, dict]]) -> None:
        """The batch endpoint: one MULTI/EXEC of enqueue calls, taken in order."""
        # The same id twice in one batch: the second is a repeat of the first.
        batch = [*batch, batch[0]] if len(batch) > 2 else batch
        requests = [(job_id, self._request(fields)) for job_id, fields in batch]
        expected = [self.model.enqueue(job_id, request, None) for job_id, request in requests]
        results = self.scripts.enqueue_many(
            [(_engine_request(request), job_id) for job_id, request in requests], now_ms=self.now
        )
        got = [(r.job_id, str(r.status), r.created, r.created_at_ms) for r in results]
        want = [(i, status, True, self.model.jobs[i].created) for _, i, status in expected]
        assert got == want

    def _types(self, job_ids: list[str]) -> list[str]:
        return [self.model.jobs[job_id].request.type for job_id in job_ids]

    def _check_returned(self, job: Job, expected: ModelJob) -> None:
        got = (job.id, str(job.status), job.attempts, job.recoveries, job.token, job.priority)
        want = (
            expected.id,
            expected.status,
            expected.attempts,
            expected.recoveries,
            expected.token,
            expected.request.priority,
        )
        assert got == want, f"returned job {got} != model {want}"

    # -- rules: clients ---------------------------------------------------------------------------

    @initialize(
        batch=st.lists(st.tuples(job_ids, requests, idempotency_keys), max_size=6),
        mood=st.sampled_from(sorted(MOODS)),
    )
    def seed(self, batch: list[tuple[str, dict, str | None]], mood: str) -> None:
        self.mood = mood
        for job_id, fields, key in batch:
            self._enqueue(job_id, self._request(fields), key)

    @rule(job_id=job_ids, fields=requests, key=idempotency_keys)
    def enqueue(self, job_id: str, fields: dict, key: str | None) -> None:
        self._enqueue(job_id, self._request(fields), key)

    @precondition(lambda self: self.model.jobs)
    @rule(data=st.data(), job_id=job_ids, how=st.sampled_from(["same id", "same key", "changed"]))
    def enqueue_again(self, data: st.DataObject, job_id: str, how: str) -> None:
        """A retried call (same job id), or a new one under a used idempotency key."""
        if how == "same id" or not self.model.idem:
            job_id = data.draw(st.sampled_from(sorted(self.model.jobs)), label="job")
            self._enqueue(job_id, self.model.jobs[job_id].request, None)
            return
        key = data.draw(st.sampled_from(sorted(self.model.idem)), label="key")
        request = self.model.idem[key][0]
        if how == "changed":
            request = replace(request, priority=request.priority + 1)
        self._enqueue(job_id, request, key)

    @precondition(_any_job)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job_id = self._target(data, "pending", "scheduled", "retrying", "processing")
        expected = self.model.cancel(job_id)
        try:
            result = self.scripts.cancel(job_id, now_ms=self.now)
        except JobNotFound:
            assert expected == "not found"
            return
        except WrongState as exc:
            assert expected == exc.status
            return
        assert expected in ("canceled", "requested", "already"), f"should be refused: {expected}"
        assert result.changed == (expected in ("canceled", "requested"))
        self._check_returned(result.job, self.model.jobs[job_id])

    @precondition(_running)
    @rule(data=st.data(), how=tokens)
    def cancel_running(self, data: st.DataObject, how: str) -> None:
        """A worker stopped a job asked to stop (or one not asked: refused)."""
        job_id = self._target(data, "processing")
        token = self._token(job_id, how)
        expected = self.model.cancel_running(job_id, token)
        got = self.scripts.cancel_running(job_id, token, "handler", now_ms=self.now)
        assert (got.code, got.status) == (expected.code, expected.status)
        if got.code is Code.DONE:
            event("cancel_running: a running job ended canceled")

    # -- rules: workers ---------------------------------------------------------------------------

    @rule(worker=st.sampled_from(WORKERS))
    def claim(self, worker: str) -> None:
        self._claim(worker)

    def _claim(self, worker: str) -> ModelJob | None:
        """Claim for `worker` as the model expects; return the job it started, if any."""
        expected = self.model.claim(worker)
        job = self.scripts.claim(worker, runnable=RUNS[worker], now_ms=self.now)
        if isinstance(expected, str):
            assert job == NotRunnable("default", expected), f"expected {expected} left, got {job}"
            event("claim: the best job left for a worker that runs its type")
            return None
        if expected is None:
            assert job is None, f"claimed {job and job.id} from an empty queue"
            return None
        assert isinstance(job, Job), f"claim found nothing; the model expected {expected.id}"
        self._check_returned(job, expected)
        assert job.worker_id == worker and job.started_at == self.now
        return expected

    @precondition(_running)
    @rule(data=st.data())
    def renew(self, data: st.DataObject) -> None:
        count = data.draw(st.integers(1, 3), label="count")
        leases = []
        for _ in range(count):
            job_id = self._target(data, "processing")
            leases.append((job_id, self._token(job_id, data.draw(tokens, label="token"))))
        expected = self.model.renew(leases)
        assert self.scripts.renew(leases, now_ms=self.now) == expected

    @precondition(_running)
    @rule(data=st.data(), how=tokens, next_for=st.none() | st.sampled_from(WORKERS))
    def complete(self, data: st.DataObject, how: str, next_for: str | None) -> None:
        job_id = self._target(data, "processing")
        self._complete(job_id, self._token(job_id, how), next_for)

    @precondition(_running)
    @rule(data=st.data(), how=tokens, permanent=st.sampled_from([False, False, True]))
    def fail(self, data: st.DataObject, how: str, permanent: bool) -> None:
        job_id = self._target(data, "processing")
        self._fail(job_id, self._token(job_id, how), permanent)

    @precondition(_running)
    @rule(data=st.data(), how=tokens, drained=st.booleans())
    def release(self, data: st.DataObject, how: str, drained: bool) -> None:
        job_id = self._target(data, "processing")
        self._release(job_id, self._token(job_id, how), drained)

    @precondition(lambda self: self.model.in_state("pending"))
    @rule(data=st.data(), worker=st.sampled_from(WORKERS))
    def claim_and_finish(self, data: st.DataObject, worker: str) -> None:
        """A worker's whole turn: claim, run, report (most jobs live like this)."""
        outcome = data.draw(st.sampled_from(MOODS[self.mood]), label="outcome")
        job = self._claim(worker)
        if job is None:
            return  # the best job was not this worker's type: it claimed nothing
        if outcome == "abandon":
            return  # the worker vanished: only the lease's expiry (recover) will tell
        if outcome in ("complete", "next"):
            self._complete(job.id, job.token, worker if outcome == "next" else None)
        elif outcome in ("fail", "permanent"):
            self._fail(job.id, job.token, outcome == "permanent")
        else:
            self._release(job.id, job.token, outcome == "drain")

    def _complete(self, job_id: str, token: int, next_for: str | None) -> None:
        result = json.dumps({"done": job_id[:8]})
        repeat = self.model.jobs.get(job_id) is not None and (
            self.model.jobs[job_id].status == "completed"
        )
        code, status = self.model.complete(job_id, token, result)
        next_job = None
        if next_for and code is Code.DONE:
            # A repeat is taken for a call whose reply was lost: it claims nothing new and
            # answers with the job the worker holds, as the lost call's reply would have.
            next_job = self.model.held_by(next_for) if repeat else self.model.claim(next_for)
        runnable = RUNS[next_for] if next_for else None
        ack = self.scripts.complete(
            job_id, token, result, claim_next_for=next_for, runnable=runnable, now_ms=self.now
        )
        assert (ack.code, ack.status) == (code, status)
        if isinstance(next_job, str):
            event("complete: the next job left for a worker that runs its type")
            assert ack.next_job == NotRunnable("default", next_job)
            return
        if next_job is not None:
            event("complete: claimed the next job")
        if next_job is None:
            assert ack.next_job is None
        else:
            assert ack.next_job is not None, f"complete claimed nothing, expected {next_job.id}"
            self._check_returned(ack.next_job, next_job)

    def _fail(self, job_id: str, token: int, permanent: bool) -> None:
        self.failures += 1
        error = f"RuntimeError: boom {self.failures}"
        # Every third failure has no traceback, as a timeout has none: it must clear the last.
        traceback = f"Traceback {self.failures}\n" if self.failures % 3 else ""
        expected = self.model.fail(job_id, token, error, traceback, permanent)
        got = self.scripts.fail(
            job_id, token, error, permanent=permanent, traceback=traceback, now_ms=self.now
        )
        assert got == expected

    def _release(self, job_id: str, token: int, drained: bool) -> None:
        expected = self.model.release(job_id, token, drained)
        got = self.scripts.release(job_id, token, drained=drained, now_ms=self.now)
        assert got == expected
        if got.code in (Code.DONE, Code.DEAD, Code.CANCELED):
            assert got.job_type == self.model.jobs[job_id].request.type

    # -- rules: scheduler -------------------------------------------------------------------------

    @rule(limit=limits)
    def promote(self, limit: int | None) -> None:
        expected = self.model.promote(limit)
        got = self.scripts.promote(limit=limit, now_ms=self.now)
        assert (
            got.scheduled,
            got.retrying,
            got.scheduled_lateness_ms,
            got.retrying_lateness_ms,
        ) == expected
        assert got.scheduled_types == self._types(got.scheduled)
        assert got.retrying_types == self._types(got.retrying)

    @rule(limit=limits)
    def recover(self, limit: int | None) -> None:
        expected = self.model.recover(limit)
        if expected[1]:
            event("recover: dead past the recovery cap")
        got = self.scripts.recover(limit=limit, now_ms=self.now)
        assert (got.requeued, got.dead, got.canceled) == expected
        assert got.canceled_types == self._types(got.canceled)
        assert got.requeued_types == self._types(got.requeued)
        assert got.dead_types == self._types(got.dead)

    @rule(limit=limits)
    def trim(self, limit: int | None) -> None:
        expected = self.model.trim(limit)
        got = self.scripts.trim(limit=limit, now_ms=self.now)
        assert (got.completed, got.canceled, got.dead) == expected

    # Exact lease, retention and age lengths land on the boundaries ("expired" is strict).
    @rule(ms=st.sampled_from([1, BASE, CAP, LEASE, LEASE + 1, RETENTION, RETENTION + 1, DLQ_AGE]))
    def advance_clock(self, ms: int) -> None:
        self.model.now += ms

    @rule(ms=st.sampled_from([BASE, CAP, LEASE, LEASE + 1, RETENTION + 1]))
    def scheduler_tick(self, ms: int) -> None:
        """What the scheduler process does each tick: time passes, then promote, recover, trim."""
        self.advance_clock(ms)
        self.promote(None)
        self.recover(None)
        self.trim(None)

    @precondition(lambda self: self.model.wake > 0)
    @rule()
    def take_wake_hint(self) -> None:
        """An idle worker pops a hint (BLPOP): keeps the hint list below its cap."""
        assert self.r.lpop(KEYS.wake) is not None
        self.model.wake -= 1

    # -- rules: operator --------------------------------------------------------------------------

    @precondition(_any_job)
    @rule(data=st.data())
    def replay(self, data: st.DataObject) -> None:
        job_id = self._target(data, "dead")
        expected = self.model.replay(job_id)
        try:
            job = self.scripts.replay(job_id, now_ms=self.now)
        except JobNotFound:
            assert expected == "not found"
            return
        except WrongState as exc:
            assert expected == exc.status
            return
        assert expected == "", f"replay should have been refused: {expected}"
        self._check_returned(job, self.model.jobs[job_id])
        assert job.last_error is None and job.traceback is None and job.finished_at is None

    @precondition(_any_job)
    @rule(data=st.data())
    def purge(self, data: st.DataObject) -> None:
        job_id = self._target(data, "dead")
        expected = self.model.purge(job_id)
        try:
            self.scripts.purge(job_id)
        except JobNotFound:
            assert expected == "not found"
            return
        except WrongState as exc:
            assert expected == exc.status
            return
        assert expected == "", f"purge should have been refused: {expected}"

    # -- the check after every step ----------------------------------------------------------------

    @invariant()
    def redis_matches_model(self) -> None:
        check_raw_state(self.r, self.model, self.tokens_seen)


@dataclass
class RawState:
    """Everything the engine keeps in Redis, read with plain commands."""

    job_ids: set[str]
    indexes: dict[str, dict[str, float]]  # state -> job id -> score
    pending_members: dict[str, str]  # job id -> pending zset member
    pending_since: dict[str, float]
    seq: int
    wake: int
    hashes: dict[str, dict[str, str]]
    ttls: dict[str, int]
    idem: dict[str, str | None]
    never_expiring: set[str]  # keys other than jobs, indexes and counters that have no TTL


def read_raw_state(r: redis.Redis, idem_keys: list[str]) -> RawState:
    prefix = KEYS.job_prefix.encode()
    every_key = set(r.scan_iter(count=1000))
    ids = sorted(k[len(prefix) :].decode() for k in every_key if k.startswith(prefix))
    # Every key has a TTL or a cap. Jobs are checked one by one below; these
    # are the capped or self-trimming structures; anything else must expire.
    bounded = {KEYS.state_index(state).encode() for state in STATES}
    bounded |= {KEYS.pending_since.encode(), KEYS.seq.encode(), KEYS.wake.encode()}
    bounded.add(KEYS.failures.encode())  # failures per second: trim keeps at most 64 of them
    # The events stream, capped by each XADD (checked in check_raw_state): on one Redis the
    # one stream of every queue, KEYS.fleet_events (the queue's own is a cluster's).
    bounded |= {KEYS.events.encode(), KEYS.fleet_events.encode()}
    bounded.add(KEYS.due.encode())  # an entry per queue holding a scheduled job (one here)
    bounded.add(KEYS.throughput.encode())  # per-minute counts: trim keeps the last 62 minutes
    others = sorted(k for k in every_key - bounded if not k.startswith(prefix))
    pipe = r.pipeline(transaction=False)
    for state in STATES:
        pipe.zrange(KEYS.state_index(state), 0, -1, withscores=True)
    pipe.zrange(KEYS.pending_since, 0, -1, withscores=True)
    pipe.get(KEYS.seq)
    pipe.llen(KEYS.wake)
    for job_id in ids:
        pipe.hgetall(KEYS.job(job_id))
        pipe.pttl(KEYS.job(job_id))
    for key in idem_keys:
        pipe.hget(KEYS.idempotency(key), "job_id")
    for key in others:
        pipe.pttl(key)
    replies = iter(pipe.execute())
    indexes: dict[str, dict[str, float]] = {}
    pending_members: dict[str, str] = {}
    for state in STATES:
        entries = [(m.decode(), s) for m, s in next(replies)]
        if state == "pending":
            pending_members = {m.split(":", 1)[1]: m for m, _ in entries}
            entries = [(m.split(":", 1)[1], s) for m, s in entries]
        indexes[state] = dict(entries)
        assert len(indexes[state]) == len(entries), f"a job twice in {state}"
    since = {m.decode(): s for m, s in next(replies)}
    seq, wake = int(next(replies) or 0), next(replies)
    hashes, ttls = {}, {}
    for job_id in ids:
        hashes[job_id] = {k.decode(): v.decode() for k, v in next(replies).items()}
        ttls[job_id] = next(replies)
    idem = {key: (v.decode() if (v := next(replies)) else None) for key in idem_keys}
    never_expiring = {key.decode() for key in others if next(replies) == -1}
    return RawState(
        set(ids), indexes, pending_members, since, seq, wake, hashes, ttls, idem, never_expiring
    )


def check_raw_state(r: redis.Redis, model: Model, tokens_seen: dict[str, int]) -> None:
    raw = read_raw_state(r, sorted(model.idem))
    # MAXLEN ~ trims whole macro nodes of stream-node-max-entries (100 by default).
    stream = max(r.xlen(KEYS.events), r.xlen(KEYS.fleet_events))
    assert stream <= EVENTS_CAP + 100, "the events stream outgrew its cap"
    lost = model.enqueued - model.jobs.keys() - model.gone
    assert not lost, f"jobs neither present nor trimmed/purged: {lost}"
    assert raw.job_ids == model.jobs.keys(), (
        f"missing {model.jobs.keys() - raw.job_ids}, unexpected {raw.job_ids - model.jobs.keys()}"
    )
    for state in STATES:
        expected = {j.id for j in model.in_state(state)}
        assert raw.indexes[state].keys() == expected, f"{state} index differs from the model"
    for job_id in raw.job_ids:
        homes = [state for state in STATES if job_id in raw.indexes[state]]
        status = raw.hashes[job_id].get("status")
        assert homes == [status], f"{job_id} is {status} but indexed in {homes}"
    for job in model.jobs.values():
        check_job(raw, job)
        token = int(raw.hashes[job.id]["token"])
        assert token >= tokens_seen.get(job.id, 0), f"{job.id}: token went backwards"
        tokens_seen[job.id] = token
    for job_id in model.gone:
        tokens_seen.pop(job_id, None)  # an id enqueued again later starts a new job
    assert raw.pending_since.keys() == raw.indexes["pending"].keys()
    assert raw.seq == model.seq, "places in line handed out"
    assert raw.wake == model.wake <= WAKE_CAP, "wake-up hints"
    for key, (_, job_id) in model.idem.items():
        assert raw.idem[key] == job_id, f"idempotency key {key}"
    assert not raw.never_expiring, f"keys with neither a TTL nor a cap: {raw.never_expiring}"


def check_job(raw: RawState, job: ModelJob) -> None:
    """Compare one job's hash and index scores with the model."""
    stored = raw.hashes[job.id]
    request = job.request
    expected = {
        "id": job.id,
        "created_at": str(job.created),
        "type": request.type,
        "payload": request.payload,
        "priority": str(request.priority),
        "max_retries": str(request.max_retries),
        "status": job.status,
        "attempts": str(job.attempts),
        "recoveries": str(job.recoveries),
        "token": str(job.token),
        "scheduled_at": _text(request.scheduled_at),
        "next_retry_at": _text(job.due if job.status == "retrying" else None),
        "finished_at": _text(job.finished if job.status in FINISHED else None),
        "started_at": _text(job.started),
        "worker_id": job.worker,
        "result": job.result,
        "traceback": job.traceback,
        "cancel_requested_at": _text(job.cancel_requested),
    }
    if job.status in ("pending", "processing"):
        expected["seq"] = str(job.seq)
    if job.status == "completed":
        # A completed job keeps what its JSON shows: its id is in its key; seq and the worker
        # are no longer read by anything.
        expected.update(id=None, worker_id=None)
    actual = {name: stored.get(name) for name in expected}
    assert actual == expected, f"job {job.id} fields differ"
    kept = history.parse(stored.get("history"), job.created)
    entries = [(e.event, e.at_ms, e.attempt, e.worker, e.error, e.actor) for e in kept.entries]
    assert (entries, kept.dropped) == (job.history, job.dropped), f"job {job.id} history"
    if job.error == LOST_WORKER:
        assert stored.get("last_error", "").startswith(LOST_WORKER), stored.get("last_error")
    else:
        assert stored.get("last_error") == job.error
    score = {
        "pending": -request.priority,
        "processing": job.lease,
        "scheduled": job.due,
        "retrying": job.due,
        "completed": job.finished,
        "canceled": job.finished,
        "dead": job.finished,
    }[job.status]
    assert raw.indexes[job.status][job.id] == score, f"{job.id}: {job.status} score"
    if job.status == "pending":
        assert raw.pending_members[job.id] == f"{job.seq:016d}:{job.id}"
        assert raw.pending_since[job.id] == job.since
        assert stored["eligible_at"] == str(job.since)
    if job.status == "processing":
        assert job.token >= 1
    # Canceled and dead jobs expire (a backstop behind trim); completed jobs are bounded by
    # trim alone (its count cap and retention), as live jobs are by their workers.
    ttl = raw.ttls[job.id]
    assert (ttl > 0) if job.status in EXPIRING else (ttl == -1), (
        f"{job.id} ({job.status}) TTL {ttl}"
    )


def _engine_request(request: Request) -> EnqueueRequest:
    return EnqueueRequest(
        type=request.type,
        payload_json=request.payload,
        priority=request.priority,
        max_retries=request.max_retries,
        scheduled_at_ms=request.scheduled_at,
    )


def _text(value: int | None) -> str | None:
    return None if value is None else str(value)


SETTINGS = settings(
    max_examples=180,
    stateful_step_count=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.fixture
def engine_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    redis_server.start()  # a crash test before us may have left it down
    client = redis.Redis(host=redis_server.host, port=redis_server.port, socket_timeout=10)
    yield client
    client.close()


@pytest.mark.slow
def test_engine_follows_the_model(engine_client: redis.Redis) -> None:
    scripts = Scripts(engine_client, KEYS, POLICY)
    scripts.load()
    run_state_machine_as_test(lambda: EngineMachine(engine_client, scripts), settings=SETTINGS)
