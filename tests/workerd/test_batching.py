"""Batched claims and acknowledgements (WORKER_BATCH, workerd.batching): a worker stepped by
hand on a real Redis, and a real workerd SIGKILLed mid-batch (its duplicate window)."""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, validate_enqueue
from shared.settings.config import Settings
from tests.fakes import IdleSlot
from tests.support.tools import wait_until
from tests.support.workerd import Workerd
from tests.workerd.conftest import Engine, Journal
from tests.workerd.stepping import (
    assert_each_completed_once,
    job_hash,
    run_until,
    too_old_lines,
)
from workerd import JobContext, handler
from workerd.worker import WorkerProcess

SHORT = "test.batch_short"
LONG = "test.batch_long"
WORKER = "w-batch"
# The Redis calls of the worker under test, in order: (script, job ids completed or written).
calls: list[tuple[str, tuple[str, ...]]] = []
# What the handlers saw: (job id, ids completed in Redis when it started).
seen: list[tuple[str, frozenset[str]]] = []
probe: dict[str, Any] = {}


def _completed_now() -> frozenset[str]:
    scripts: Scripts = probe["scripts"]
    return frozenset(
        m.decode() for m in scripts.redis.zrange(scripts.q("default").completed, 0, -1)
    )


@handler(SHORT)
def _short(payload: dict[str, Any], job: JobContext) -> None:
    seen.append((job.id, _completed_now()))
    if payload.get("fail"):
        raise RuntimeError("boom")
    if payload.get("await_acks"):
        # A short type's slow run: its work lasts until the completions before it are in
        # Redis, bounded (2 s, 40 ack delays); what it found is recorded, nothing raised.
        deadline = time.monotonic() + 2.0
        while len(_completed_now()) < payload["await_acks"] and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.append((f"{job.id}:end", _completed_now()))


@handler(LONG)
def _long(payload: dict[str, Any], job: JobContext) -> None:
    seen.append((job.id, _completed_now()))
    time.sleep(0.12)  # past workerd.prefetch.SHORT_JOB


@pytest.fixture
def scripts(r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> Iterator[Scripts]:
    made = Scripts(r)
    made.load()
    seen.clear()
    calls.clear()
    probe.clear()
    probe["scripts"] = made
    for name in ("claim", "claim_batch", "complete", "complete_batch", "fail", "release"):
        _record_calls(monkeypatch, made, name)
    yield made


def _record_calls(monkeypatch: pytest.MonkeyPatch, scripts: Scripts, name: str) -> None:
    real = getattr(scripts, name)

    def recording(*args: Any, **kwargs: Any) -> Any:
        if name == "complete_batch":
            ids = tuple(job_id for job_id, _, _ in args[1])
        elif name in ("fail", "release", "complete"):
            ids = (args[0],)
        else:
            ids = ()
        calls.append((name, ids))
        return real(*args, **kwargs)

    monkeypatch.setattr(scripts, name, recording)


def _worker(scripts: Scripts, size: int = 8, **kwargs: Any) -> WorkerProcess:
    settings = Settings.from_env({"WORKER_BATCH": str(size)})
    return WorkerProcess(settings, scripts, IdleSlot(), WORKER, os.getppid(), **kwargs)


def _enqueue(scripts: Scripts, job_type: str, count: int, **payload: Any) -> list[str]:
    request = validate_enqueue({"type": job_type, "max_retries": 1, "payload": payload})
    return [scripts.enqueue(request, str(uuid.uuid4())).job_id for _ in range(count)]


def _ran_once_in_order(scripts: Scripts, ids: list[str]) -> None:
    assert_each_completed_once(scripts, ids)
    assert [job_id for job_id, _ in seen] == ids  # FIFO, each ran once


def _batches() -> list[tuple[str, ...]]:
    return [ids for name, ids in calls if name == "complete_batch"]


def test_a_backlog_runs_in_batches_one_call_each(scripts: Scripts) -> None:
    ids = _enqueue(scripts, SHORT, 33)
    worker = _worker(scripts)
    assert worker.batch is not None and not worker.prefetch  # batching replaces holding
    run_until(worker, lambda: worker.jobs_done == 33)
    worker._hand_back_unstarted_job()

    _ran_once_in_order(scripts, ids)
    names = Counter(name for name, _ in calls)
    # One claim of 8; then each batch's completions claim the next 8: 33 jobs in 6 calls.
    assert (names["claim_batch"], names["claim"], names["complete"]) == (1, 0, 0)
    assert [len(b) for b in _batches()] == [8, 8, 8, 8, 1]
    assert sum(len(b) for b in _batches()) == 33


def test_a_completion_waits_at_most_for_the_rest_of_its_batch(scripts: Scripts) -> None:
    ids = _enqueue(scripts, SHORT, 12)
    worker = _worker(scripts)
    run_until(worker, lambda: worker.jobs_done == 12)
    # Each job of a batch started with the completions before it in the batch not yet sent
    # (its first job's type is known short once it ran), and they went with the next claim.
    assert [len(done) for _, done in seen] == [0] * 8 + [8] * 4
    assert _batches()[0] == tuple(ids[:8])


def test_a_failure_sends_the_completions_before_it_at_once(scripts: Scripts) -> None:
    ids = _enqueue(scripts, SHORT, 3) + _enqueue(scripts, SHORT, 1, fail=True)
    ids += _enqueue(scripts, SHORT, 2)
    worker = _worker(scripts)
    run_until(worker, lambda: worker.jobs_done == 6)
    worker._hand_back_unstarted_job()

    # The completions before the failure go first, then the failure, each at once.
    order = [(name, job_ids) for name, job_ids in calls if name in ("complete_batch", "fail")]
    assert order == [
        ("complete_batch", tuple(ids[:3])),
        ("fail", (ids[3],)),
        ("complete_batch", tuple(ids[4:])),
    ]
    assert job_hash(scripts, ids[3])[b"status"] == b"dead"
    assert all(job_hash(scripts, i)[b"status"] == b"completed" for i in ids[:3] + ids[4:])


def test_a_job_not_known_short_starts_with_every_completion_before_it_sent(
    scripts: Scripts,
) -> None:
    ids = _enqueue(scripts, SHORT, 3) + _enqueue(scripts, LONG, 2) + _enqueue(scripts, SHORT, 1)
    worker = _worker(scripts)
    run_until(worker, lambda: worker.jobs_done == 6)
    worker._hand_back_unstarted_job()

    started_with = dict(seen)
    assert started_with[ids[3]] >= set(ids[:3])  # a type never seen: all acknowledged first
    assert started_with[ids[4]] >= set(ids[:4])  # a long type: likewise
    _ran_once_in_order(scripts, ids)


def test_the_ack_delay_bound_sends_an_old_completion_before_the_next_job(
    scripts: Scripts, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("workerd.batching.ACK_DELAY", 0.0)  # every completion is overdue
    ids = _enqueue(scripts, SHORT, 6)
    worker = _worker(scripts)
    run_until(worker, lambda: worker.jobs_done == 6)

    # The first job's completion is sent with its successor's start (a type known short by
    # then, the bound alone sends it), and so on.
    assert [done for _, done in seen] == [frozenset(ids[:n]) for n in range(6)]
    assert all(len(batch) == 1 for batch in _batches())
    assert Counter(name for name, _ in calls)["claim_batch"] == 1  # the claims stay batched


def test_a_stopping_worker_sends_its_completions_and_hands_back_the_rest_uncounted(
    scripts: Scripts,
) -> None:
    ids = _enqueue(scripts, SHORT, 12)
    worker = _worker(scripts)
    run_until(worker, lambda: worker.jobs_done == 4)
    assert worker.batch is not None and worker.batch.done  # completions waiting
    worker.stopping = True
    worker._hand_back_unstarted_job()  # what run() does on the way out

    states = {i: job_hash(scripts, i) for i in ids}
    assert [i for i in ids if states[i][b"status"] == b"completed"] == ids[:4]
    for job_id in ids[4:]:
        assert states[job_id][b"status"] == b"pending"
        assert (states[job_id][b"attempts"], states[job_id].get(b"recoveries", b"0")) == (
            b"0",
            b"0",
        )
    assert scripts.redis.zcard(scripts.q("default").processing) == 0


def test_quiet_sends_the_completions_and_hands_back_the_batch(scripts: Scripts) -> None:
    ids = _enqueue(scripts, SHORT, 12)
    quiet = {"on": False}
    worker = _worker(scripts, quiet=lambda _: quiet["on"])
    run_until(worker, lambda: worker.jobs_done == 4)
    quiet["on"] = True
    for _ in range(3):
        worker.step()

    assert worker.jobs_done in (4, 5)  # the job returned with the last write may still run
    assert scripts.redis.zcard(scripts.q("default").processing) == 0
    pending = [i for i in ids if job_hash(scripts, i)[b"status"] == b"pending"]
    assert len(pending) == 12 - worker.jobs_done


def test_jobs_held_past_half_their_lease_are_handed_back_not_run(
    scripts: Scripts, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = _enqueue(scripts, SHORT, 8)
    worker = _worker(scripts)
    assert worker.batch is not None
    # Every job in hand counts as past half its lease; a claim's first job, started at once,
    # does not (test_prefetch's stall tests age that one).
    monkeypatch.setattr(worker.batch, "held_too_long", lambda limit, now: True)
    run_until(worker, lambda: all(job_hash(scripts, i)[b"status"] == b"completed" for i in ids))

    _ran_once_in_order(scripts, ids)
    assert Counter(name for name, _ in calls)["release"] >= 7  # each batch's rest went back


def test_recycling_claims_no_more_than_the_jobs_left(scripts: Scripts) -> None:
    _enqueue(scripts, SHORT, 20)
    settings = Settings.from_env({"WORKER_BATCH": "8", "WORKER_MAX_JOBS": "5"})
    worker = WorkerProcess(settings, scripts, IdleSlot(), WORKER, os.getppid())
    while worker.keep_going():
        worker.step()
    worker._hand_back_unstarted_job()

    assert worker.jobs_done == 5
    assert scripts.redis.zcard(scripts.q("default").completed) == 5
    assert scripts.redis.zcard(scripts.q("default").processing) == 0
    assert Counter(name for name, _ in calls)["release"] == 0  # never claimed past the 5


def test_a_lost_reply_is_repeated_and_completes_nothing_twice(
    scripts: Scripts, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = scripts.complete_batch
    lost = {"count": 0}

    def losing(*args: Any, **kwargs: Any) -> Any:
        answer = real(*args, **kwargs)  # it landed in Redis ...
        if lost["count"] < 3:
            lost["count"] += 1
            raise redis.ConnectionError("reply lost")  # ... and its reply did not come
        return answer

    monkeypatch.setattr(scripts, "complete_batch", losing)
    ids = _enqueue(scripts, SHORT, 20)
    worker = _worker(scripts)
    worker.backoff.sleep = lambda seconds: None
    run_until(worker, lambda: worker.jobs_done == 20)
    worker._hand_back_unstarted_job()

    assert lost["count"] == 3
    _ran_once_in_order(scripts, ids)
    assert scripts.redis.zcard(scripts.q("default").processing) == 0


def test_durable_mode_and_a_cluster_run_one_job_a_call(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A batch goes in one bare EVALSHA: no WAIT after it, no cluster routing.
    durable = Scripts(r, policy=dataclasses.replace(Scripts(r).policy, wait_replicas=1))
    assert _worker(durable).batch is None
    assert _worker(Scripts(r)).batch is not None
    monkeypatch.setattr("workerd.batching.is_cluster", lambda client: True)
    assert _worker(Scripts(r)).batch is None
    off = _worker(Scripts(r), size=1)
    # The default path holds its next job: a flusher for a held job that runs long, whose
    # thread starts only with the first held job (workerd.prefetch.READ_LATE).
    assert off.batch is None and off.flusher is not None and off.flusher._thread is None
    plain = WorkerProcess(
        Settings.from_env({"WORKER_PREFETCH": "off"}), Scripts(r), IdleSlot(), WORKER, os.getppid()
    )
    assert plain.batch is None and plain.flusher is None  # neither mode: no flusher at all


def test_a_worker_that_cannot_batch_says_why(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    durable = Scripts(r, policy=dataclasses.replace(Scripts(r).policy, wait_replicas=1))
    with caplog.at_level(logging.INFO, logger="workerd.batching"):
        _worker(durable)
    [off] = [rec for rec in caplog.records if rec.getMessage() == "worker_batch_off"]
    assert off.reason == "durable mode (TASKFORGE_WAIT_REPLICAS)"  # type: ignore[attr-defined]
    assert off.worker_batch == 8  # type: ignore[attr-defined]


# A real workerd with WORKER_BATCH=8: a worker SIGKILLed mid-batch. ---------------------------


def test_a_worker_killed_mid_batch_runs_again_only_the_job_it_was_running(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal
) -> None:
    # Enqueued before workerd starts: its first claim takes the whole batch of 8 (3 quick,
    # the killer, 4 of the rest).
    quick = [engine.enqueue("journal", {"file": journal.file}) for _ in range(3)]
    # A short type's job that runs 0.5 s (10 ack delays), then SIGKILLs its own worker: a
    # chosen point, no timing window (handlers_for_tests.journal).
    killer = engine.enqueue("journal", {"file": journal.file, "die_after": 0.5})
    rest = [engine.enqueue("journal", {"file": journal.file}) for _ in range(8)]
    workerd = start_workerd(WORKER_COUNT="1", WORKER_BATCH="8", TASK_VISIBILITY_TIMEOUT="20s")
    [started] = workerd.events("supervisor_started")
    assert started["batch"] == 8  # the operator sees the setting at start
    assert started["prefetch"] is False  # batching replaces holding the next job

    everything = [*quick, killer, *rest]
    jobs = engine.wait_all(everything, (JobState.COMPLETED, JobState.DEAD), timeout=45)
    assert {job.status for job in jobs.values()} == {JobState.COMPLETED}  # nothing lost
    [kill] = journal.entries("kill")
    ended = {e["id"]: e["end"] for e in journal.entries("end") if e["pid"] == kill["pid"]}
    # The jobs the dead process finished ended long before the kill (the killer ran 0.5 s
    # after them): past the ack delay, the flusher sent their completions while it ran.
    assert set(ended) == set(quick)
    assert all(kill["end"] - at > 0.25 for at in ended.values())
    runs = Counter(entry["id"] for entry in journal.entries("start"))
    # The duplicate window held none of them: only the running job runs again (it counts a
    # recovery); the jobs still in hand go back as never started.
    assert {i for i in everything if runs[i] > 1} == {killer}
    assert runs[killer] == 2
    assert (jobs[killer].attempts, jobs[killer].recoveries) == (1, 1)
    assert {(jobs[i].attempts, jobs[i].recoveries) for i in quick + rest} == {(1, 0)}
    [recovered] = workerd.events("job_recovered")
    assert recovered["job_id"] == killer
    in_hand = set(rest[:4])

    def hand_released() -> bool:
        return in_hand <= {e["job_id"] for e in workerd.events("job_released")}

    wait_until(hand_released, 5.0, "the job_released lines of the jobs in hand")


# Review (review45): defects found in the merge of batchack; each test fails on e3e3ade. -------


def _enqueue_to(scripts: Scripts, queue: str, count: int) -> list[str]:
    request = validate_enqueue({"type": SHORT, "queue": queue, "max_retries": 1, "payload": {}})
    return [scripts.enqueue(request, str(uuid.uuid4())).job_id for _ in range(count)]


def test_completions_wait_no_longer_than_the_ack_delay_while_a_short_type_runs_long(
    scripts: Scripts,
) -> None:
    ids = _enqueue(scripts, SHORT, 3) + _enqueue(scripts, SHORT, 1, await_acks=3)
    worker = _worker(scripts)
    run_until(worker, lambda: worker.jobs_done == 4)

    # The fourth job (a type known short) starts with three completions waiting; it runs
    # 2 s: the ack delay (50 ms) must send them meanwhile, not when the job ends.
    assert dict(seen)[f"{ids[3]}:end"] >= set(ids[:3])


class _Clock:
    """workerd.worker's `time`, with a monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.perf_counter = time.perf_counter

    def monotonic(self) -> float:
        return self.now


def test_jobs_in_hand_are_aged_after_a_flush_that_waited_out_an_outage(
    scripts: Scripts, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = _Clock()
    monkeypatch.setattr("workerd.worker.time", clock)
    monkeypatch.setattr("workerd.batching.ACK_DELAY", 0.0)  # the second job flushes the first
    real = scripts.complete_batch
    outage = {"left": 1}

    def failing(*args: Any, **kwargs: Any) -> Any:
        if outage["left"]:
            outage["left"] -= 1
            raise redis.ConnectionError("Redis down")
        return real(*args, **kwargs)

    monkeypatch.setattr(scripts, "complete_batch", failing)
    ids = _enqueue(scripts, SHORT, 8)
    worker = _worker(scripts)
    worker.hold_limit = 10.0

    def outage_lasts(seconds: float) -> None:
        clock.now += 20.0  # the flush waits out an outage longer than half the lease

    worker.backoff.sleep = outage_lasts
    run_until(worker, lambda: all(job_hash(scripts, i)[b"status"] == b"completed" for i in ids))

    # The seven jobs held through the outage (20 s > hold_limit) go back unrun, as
    # held_too_long promises; none starts on a lease that may have lapsed (on e3e3ade the
    # age is read before the flush: the second job runs 20 s after its claim, then the
    # other six go back).
    released = [ids_ for name, ids_ in calls if name == "release"]
    assert released == [(i,) for i in ids[1:]]


def test_a_quiet_that_passes_before_the_next_step_strands_no_job_in_hand(
    scripts: Scripts,
) -> None:
    a = _enqueue_to(scripts, "qa", 2)
    b = _enqueue_to(scripts, "qb", 8)
    reads = iter([False, True])  # quiet for one read: the one after the first job
    settings = Settings.from_env({"WORKER_BATCH": "8", "WORKER_QUEUES": "qa,qb"})
    worker = WorkerProcess(
        settings, scripts, IdleSlot(), WORKER, os.getppid(), quiet=lambda _: next(reads, False)
    )
    run_until(worker, lambda: worker.jobs_done == 10)
    worker._hand_back_unstarted_job()

    # a[1] stayed in hand across the quiet; it ran, and its completion must land in its own
    # queue, not be sent with qb's batch (as qb's job key: NOT_FOUND, its lease left to lapse).
    for job_id in a:
        assert scripts.redis.hget(scripts.q("qa").job(job_id), "status") == b"completed", job_id
    assert scripts.redis.zcard(scripts.q("qa").processing) == 0
    assert all(scripts.redis.hget(scripts.q("qb").job(i), "status") == b"completed" for i in b)


def _lose_a_reply(
    monkeypatch: pytest.MonkeyPatch,
    scripts: Scripts,
    name: str,
    which: Callable[[dict[str, Any]], bool],
) -> None:
    """Have the first call of script `name` that `which` picks land, then lose its reply."""
    real = getattr(scripts, name)
    lost = {"left": 1}

    def losing(*args: Any, **kwargs: Any) -> Any:
        answer = real(*args, **kwargs)  # it landed: what it claimed has its lease running
        if which(kwargs) and lost["left"]:
            lost["left"] -= 1
            raise redis.ConnectionError("reply lost")
        return answer

    monkeypatch.setattr(scripts, name, losing)


def _worker_in_long_outages(scripts: Scripts, monkeypatch: pytest.MonkeyPatch) -> WorkerProcess:
    """Return a batched worker whose every backoff lasts 20 s on its clock (half its lease:
    10 s)."""
    clock = _Clock()
    monkeypatch.setattr("workerd.worker.time", clock)
    worker = _worker(scripts)
    worker.hold_limit = 10.0

    def outage_lasts(seconds: float) -> None:
        clock.now += 20.0

    worker.backoff.sleep = outage_lasts
    return worker


def test_a_batch_got_by_repeating_a_lost_reply_is_aged_from_its_first_send(
    scripts: Scripts, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The first complete_batch that claims lands, the next 8 claimed, and its reply is lost.
    _lose_a_reply(monkeypatch, scripts, "complete_batch", lambda kwargs: bool(kwargs["count"]))
    ids = _enqueue(scripts, SHORT, 16)
    # The repeat comes 20 s after the call that claimed.
    worker = _worker_in_long_outages(scripts, monkeypatch)
    run_until(worker, lambda: all(job_hash(scripts, i)[b"status"] == b"completed" for i in ids))

    # The repeat answers with the jobs the first call claimed 20 s ago (> hold_limit): they
    # must not be held and run as if claimed now (on e3e3ade none goes back: claimed_at is
    # the repeat's reply time).
    released = {ids_[0] for name, ids_ in calls if name == "release"}
    assert set(ids[9:]) <= released
    # One line says so: the first of them, and the rest that went back with it.
    assert too_old_lines(caplog) == [(ids[9], "done", len(released) - 1)]


def test_a_batch_claim_repeated_after_a_lost_reply_is_aged_from_its_first_send(
    scripts: Scripts, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The first claim lands (8 claimed, leases running) and its reply is lost.
    _lose_a_reply(monkeypatch, scripts, "claim_batch", lambda kwargs: True)
    ids = _enqueue(scripts, SHORT, 8)
    # The planner's repeat comes 20 s after the claim that landed.
    worker = _worker_in_long_outages(scripts, monkeypatch)
    run_until(worker, lambda: all(job_hash(scripts, i)[b"status"] == b"completed" for i in ids))

    # The repeat answers with the 8 claimed 20 s ago (> hold_limit): all go back unrun, the
    # first as it would start (as a repeated claim's job does without a batch), then the 7 in
    # hand; the next claim takes them afresh.
    assert [ids_ for name, ids_ in calls if name == "release"] == [(i,) for i in ids]
    # One line says so: the first job, and the 7 that went back with it.
    assert too_old_lines(caplog) == [(ids[0], "done", 7)]


def test_a_flush_that_raises_puts_its_completions_back_and_the_flusher_tries_again(
    scripts: Scripts, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in the flusher's send (not a Redis error) must neither end its thread nor lose
    the completions it took: they are written at its next try, while the long job still runs,
    and each job completes once (none waits for its lease to run out and runs again)."""
    real = scripts.complete_batch
    raised: list[str] = []

    def first_flush_raises(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "ack-flusher" and not raised:
            raised.append(threading.current_thread().name)
            raise ValueError("a bug in the flush")
        return real(*args, **kwargs)

    monkeypatch.setattr(scripts, "complete_batch", first_flush_raises)
    ids = _enqueue(scripts, SHORT, 3) + _enqueue(scripts, SHORT, 1, await_acks=3)
    worker = _worker(scripts)
    with caplog.at_level(logging.ERROR, logger="workerd.ack_flusher"):
        run_until(worker, lambda: worker.jobs_done == 4)

    assert raised == ["ack-flusher"]
    assert [r.message for r in caplog.records] == ["ack_flush_failed"]
    # The fourth job ran 2 s at most, waiting for the three completions: the retry sent them.
    assert dict(seen)[f"{ids[3]}:end"] >= set(ids[:3])
    run_until(worker, lambda: not worker.batch.done)  # the fourth's own completion
    assert_each_completed_once(scripts, ids)
    assert [job_id for job_id, _ in seen if not job_id.endswith(":end")] == ids


def test_a_flush_that_raises_after_its_write_records_each_completion_once(
    scripts: Scripts, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug while recording completions already written (here the second of three) must not
    put them back: a repeat is answered DONE (complete_batch.lua: same token, completed) and
    would be recorded, logged job_completed and counted, a second time."""
    ids = _enqueue(scripts, SHORT, 3) + _enqueue(scripts, SHORT, 1, await_acks=3)
    worker = _worker(scripts)
    real = worker.acks.log_completion
    recorded: list[str] = []
    raised: list[str] = []

    def second_record_raises(job: Any, ack: Any, fields: dict[str, object]) -> None:
        if threading.current_thread().name == "ack-flusher" and len(recorded) == 1 and not raised:
            raised.append(job.id)
            raise ValueError("a bug in recording")
        real(job, ack, fields)
        recorded.append(job.id)

    worker.acks.log_completion = second_record_raises  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR, logger="workerd.ack_flusher"):
        run_until(worker, lambda: worker.jobs_done == 4)
        run_until(worker, lambda: not worker.batch.done)  # the fourth's own completion

    assert raised == [ids[1]]
    assert [r.message for r in caplog.records] == ["ack_flush_failed"]
    assert_each_completed_once(scripts, ids)
    # Each written once, recorded at most once: none twice (the bug lost ids[1:3]'s records).
    assert [job_id for job_id, n in Counter(recorded).items() if n > 1] == []
    assert _batches()[0] == tuple(ids[:3])
    assert [batch for batch in _batches() if set(batch) & set(ids[:3])] == [tuple(ids[:3])]
