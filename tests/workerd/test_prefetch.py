"""WORKER_PREFETCH=on (workerd.prefetch): a real WorkerProcess, stepped in this process against
the private redis-server, starts its next job while the last completion's reply is in flight,
and keeps every guarantee of the worker that waits: each job completes once, nothing is
counted that did not run, a held job goes back on a stop or quiet, a held job too old to trust
its lease is handed back, a lost reply is repeated with the same token."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from prometheus_client import REGISTRY

from shared.engine.scripts import Scripts
from shared.engine.scripts.job_scripts import PendingAck, PendingClaim
from shared.model.jobs import Job, JobState, validate_enqueue
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
from workerd.prefetch import InFlight
from workerd.slots import SlotTable
from workerd.worker import WorkerProcess

FINISHED = (JobState.COMPLETED, JobState.DEAD)
SHORT = "test.prefetch_short"
LONG = "test.prefetch_long"
# What the handlers saw, in order: ("start", job id, ids this worker holds in `processing`).
seen: list[tuple[str, str, frozenset[str]]] = []
probe: dict[str, Any] = {}


def _held_now() -> frozenset[str]:
    """The ids processing under the test worker's id, read from Redis by the handler."""
    scripts: Scripts = probe["scripts"]
    r = scripts.redis
    ids = [m.decode() for m in r.zrange(scripts.q("default").processing, 0, -1)]
    return frozenset(
        i for i in ids if r.hget(scripts.q("default").job(i), "worker_id") == probe["worker"]
    )


@handler(SHORT)
def _short(payload: dict[str, Any], job: JobContext) -> None:
    seen.append(("start", job.id, _held_now()))
    # Runs until the worker has recorded (logged and counted) another job's completion.
    awaited = payload.get("await_recorded") if isinstance(payload, dict) else None
    deadline = time.monotonic() + 5
    while awaited and awaited not in probe["recorded"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the completion of {awaited} was never recorded")
        time.sleep(0.01)


@handler(LONG)
def _long(payload: dict[str, Any], job: JobContext) -> None:
    seen.append(("start", job.id, _held_now()))
    time.sleep(0.12)  # past workerd.prefetch.SHORT_JOB


@pytest.fixture
def scripts(r: redis.Redis) -> Iterator[Scripts]:
    made = Scripts(r)
    made.load()
    seen.clear()
    probe.clear()
    probe["scripts"] = made
    yield made


def _worker(scripts: Scripts, name: str = "w-prefetch", **env: str) -> WorkerProcess:
    probe["worker"] = name.encode()
    settings = Settings.from_env({"WORKER_PREFETCH": "on", **env})
    return WorkerProcess(settings, scripts, IdleSlot(), name, os.getppid())


def _enqueue(scripts: Scripts, job_type: str, count: int) -> list[str]:
    request = validate_enqueue({"type": job_type})
    return [scripts.enqueue(request, str(uuid.uuid4())).job_id for _ in range(count)]


def _count_hand_backs(worker: WorkerProcess) -> list[str]:
    """Return the list of job ids `worker` hands back from now on, in order."""
    handed_back: list[str] = []
    hand_back = worker._hand_back

    def counting(job: Job) -> bool:
        handed_back.append(job.id)
        return hand_back(job)

    worker._hand_back = counting  # type: ignore[method-assign]
    return handed_back


def stalls_counted(**labels: str) -> float:
    """Return taskforge_claims_too_old_total{labels} in this process's registry."""
    return REGISTRY.get_sample_value("taskforge_claims_too_old_total", labels) or 0.0


def _lose_replies(
    monkeypatch: pytest.MonkeyPatch, pending: type[PendingAck] | type[PendingClaim], times: int
) -> dict[str, int]:
    """Make the first `times` replies read through `pending` raise as lost, after the call
    landed in Redis; return the count of those lost so far."""
    result = pending.result
    lost = {"count": 0}

    def losing(self: Any) -> Any:
        answer = result(self)  # it landed in Redis ...
        if lost["count"] < times:
            lost["count"] += 1
            raise redis.ConnectionError("reply lost")  # ... and its reply did not come
        return answer

    monkeypatch.setattr(pending, "result", losing)
    return lost


def test_short_jobs_run_with_the_next_one_held_and_each_completes_once(
    scripts: Scripts,
) -> None:
    ids = _enqueue(scripts, SHORT, 30)
    worker = _worker(scripts)
    run_until(worker, lambda: worker.jobs_done == 30)
    worker._hand_back_unstarted_job()  # what run() does on the way out

    assert_each_completed_once(scripts, ids)
    assert [job_id for _, job_id, _ in seen] == ids  # FIFO, each started once
    # Once a run of the type is on record, each job ran with its successor claimed.
    held = [len(ids_held) for _, _, ids_held in seen]
    assert held[0] == 1  # the very first: no run of the type on record yet
    assert max(held) == 2 and held.count(2) >= 25, held
    assert scripts.redis.zcard(scripts.q("default").processing) == 0


def test_the_completion_is_sent_before_the_next_job_and_read_after_it(
    scripts: Scripts, monkeypatch: pytest.MonkeyPatch
) -> None:
    order: list[tuple[str, str]] = []
    names: dict[int, str] = {}  # id(PendingAck) -> the job it completes
    begin = Scripts.complete_begin
    result = PendingAck.result

    def sending(self: Scripts, job_id: str, *args: Any, **kwargs: Any) -> PendingAck:
        order.append(("sent", job_id))
        pending = begin(self, job_id, *args, **kwargs)
        names[id(pending)] = job_id
        return pending

    def reading(self: PendingAck) -> Any:
        order.append(("read", names[id(self)]))
        return result(self)

    monkeypatch.setattr(Scripts, "complete_begin", sending)
    monkeypatch.setattr(PendingAck, "result", reading)
    ids = _enqueue(scripts, SHORT, 6)
    worker = _worker(scripts)
    real_execute = worker._execute

    def executing(job: Any) -> Any:
        order.append(("start", job.id))
        return real_execute(job)

    worker._execute = executing  # type: ignore[method-assign]
    run_until(worker, lambda: worker.jobs_done == 6)
    worker._hand_back_unstarted_job()

    # A job sent ahead is read only after the next job ran.
    for sent_at, (event, job_id) in enumerate(order):
        if event != "sent":
            continue
        following = order[sent_at + 1 :]
        assert following[0][0] == "start", order
        assert ("read", job_id) in following[1:], order
    assert sum(event == "sent" for event, _ in order) >= 3
    assert all(job_hash(scripts, i)[b"status"] == b"completed" for i in ids)


def test_a_worker_fed_one_job_at_a_time_claims_nothing_ahead(
    scripts: Scripts, monkeypatch: pytest.MonkeyPatch
) -> None:
    ahead: list[str] = []
    begin = Scripts.claim_begin

    def counting(self: Scripts, worker_id: str, **kwargs: Any) -> Any:
        ahead.append(worker_id)
        return begin(self, worker_id, **kwargs)

    monkeypatch.setattr(Scripts, "claim_begin", counting)
    worker = _worker(scripts)
    for done in range(1, 6):  # each job enqueued once the last is done: no backlog
        _enqueue(scripts, SHORT, 1)
        run_until(worker, lambda done=done: worker.jobs_done == done)
    assert ahead == []
    _enqueue(scripts, SHORT, 5)  # a backlog: the second job (it came with a completion) on
    run_until(worker, lambda: worker.jobs_done == 10)
    assert len(ahead) == 1


def test_no_job_is_held_behind_a_long_one(scripts: Scripts) -> None:
    ids = _enqueue(scripts, LONG, 4)
    worker = _worker(scripts)
    run_until(worker, lambda: worker.jobs_done == 4)
    assert [len(held) for _, _, held in seen] == [1, 1, 1, 1]
    assert all(job_hash(scripts, i)[b"status"] == b"completed" for i in ids)


def test_a_stopping_worker_hands_its_held_job_back_uncounted(scripts: Scripts) -> None:
    ids = _enqueue(scripts, SHORT, 10)
    worker = _worker(scripts)
    run_until(worker, lambda: worker.jobs_done == 4)
    assert worker.inflight is not None and worker.inflight.claims  # one job held ahead
    worker.stopping = True
    worker._hand_back_unstarted_job()

    states = {i: job_hash(scripts, i) for i in ids}
    done = [i for i in ids if states[i][b"status"] == b"completed"]
    waiting = [i for i in ids if states[i][b"status"] == b"pending"]
    assert len(done) == 4 and len(waiting) == 6, states
    for job_id in waiting:
        assert states[job_id][b"attempts"] == b"0"
        assert states[job_id].get(b"recoveries", b"0") == b"0"
    assert scripts.redis.zcard(scripts.q("default").processing) == 0


def test_quiet_hands_back_the_held_job_and_claims_nothing_more(scripts: Scripts) -> None:
    ids = _enqueue(scripts, SHORT, 10)
    quiet = {"on": False}
    settings = Settings.from_env({"WORKER_PREFETCH": "on"})
    probe["worker"] = b"w-quiet"
    worker = WorkerProcess(
        settings, scripts, IdleSlot(), "w-quiet", os.getppid(), quiet=lambda _: quiet["on"]
    )
    run_until(worker, lambda: worker.jobs_done == 4)
    assert worker.inflight is not None and worker.inflight.claims  # one job held ahead
    quiet["on"] = True
    for _ in range(3):
        worker.step()
    assert worker.jobs_done in (4, 5)  # the job in hand when quiet came may still run
    assert scripts.redis.zcard(scripts.q("default").processing) == 0
    pending = [i for i in ids if job_hash(scripts, i)[b"status"] == b"pending"]
    assert len(pending) == 10 - worker.jobs_done


def test_a_held_job_too_old_for_its_lease_is_handed_back_not_run(
    scripts: Scripts, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ids = _enqueue(scripts, SHORT, 8)
    worker = _worker(scripts)
    # Every held job counts as past half its lease; a job claimed and started at once does not
    # (the stall tests below age that one).
    monkeypatch.setattr(InFlight, "age", lambda self: float("inf"))
    handed_back = _count_hand_backs(worker)
    run_until(worker, lambda: worker.jobs_done == 8)
    aged = list(handed_back)
    worker._hand_back_unstarted_job()

    assert_each_completed_once(scripts, ids)
    assert [job_id for _, job_id, _ in seen] == ids  # each ran once, in order
    assert len(aged) >= 5, aged  # each held job went back before its turn
    # Each says why, and that it went back (nothing recovered it meanwhile).
    assert too_old_lines(caplog) == [(job_id, "done", 0) for job_id in aged]


def test_a_lost_reply_is_repeated_with_the_same_token_and_claims_nothing_twice(
    scripts: Scripts, monkeypatch: pytest.MonkeyPatch
) -> None:
    lost = _lose_replies(monkeypatch, PendingAck, 3)
    ids = _enqueue(scripts, SHORT, 12)
    worker = _worker(scripts)
    run_until(worker, lambda: worker.jobs_done == 12)
    worker._hand_back_unstarted_job()

    assert lost["count"] == 3
    assert [job_id for _, job_id, _ in seen] == ids
    for job_id in ids:
        job = job_hash(scripts, job_id)
        assert (job[b"status"], job[b"attempts"]) == (b"completed", b"1")
    assert scripts.redis.zcard(scripts.q("default").processing) == 0


def test_a_lost_claim_reply_is_repeated_by_its_request_id(
    scripts: Scripts, monkeypatch: pytest.MonkeyPatch
) -> None:
    lost = _lose_replies(monkeypatch, PendingClaim, 2)
    ids: list[str] = []
    worker = _worker(scripts)
    for batch in range(3):  # each batch a backlog: its second job claims one ahead
        ids += _enqueue(scripts, SHORT, 4)
        run_until(worker, lambda batch=batch: worker.jobs_done == 4 * (batch + 1))
    worker._hand_back_unstarted_job()

    assert lost["count"] == 2
    assert [job_id for _, job_id, _ in seen] == ids
    assert_each_completed_once(scripts, ids)
    assert scripts.redis.zcard(scripts.q("default").processing) == 0


def test_the_reply_read_later_survives_a_flushed_script_cache(scripts: Scripts) -> None:
    ids = _enqueue(scripts, SHORT, 2)
    claimed = scripts.claim("w-flush")
    assert isinstance(claimed, Job)
    scripts.redis.script_flush()
    pending = scripts.complete_begin(claimed.id, claimed.token, claim_next_for="w-flush")
    assert pending.sent.pending
    ack = pending.result()  # NOSCRIPT: loaded and sent again, once
    assert ack.next_job is not None and ack.next_job.id == ids[1]  # type: ignore[union-attr]
    assert job_hash(scripts, ids[0])[b"status"] == b"completed"


# A real workerd with WORKER_PREFETCH=on: a worker SIGKILLed while it holds a job. ----------


def test_a_killed_worker_holding_a_job_gives_it_back_uncounted(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal
) -> None:
    workerd = start_workerd(WORKER_COUNT="1", WORKER_PREFETCH="on")
    [started] = workerd.events("supervisor_started")
    assert started["prefetch"] is True  # the operator sees the setting at start
    # Quick journal jobs make the type short in the worker, so the worker holds the job after
    # the sleeper while the sleeper runs.
    quick = [engine.enqueue("journal", {"file": journal.file}) for _ in range(6)]
    sleeper = engine.enqueue("journal", {"file": journal.file, "sleep": 3})
    after = [engine.enqueue("journal", {"file": journal.file}) for _ in range(3)]
    [first] = journal.wait_for("start", sleeper)

    def holding() -> bool:
        held = engine.job(after[0])
        return (held.status, held.worker_id) == (JobState.PROCESSING, engine.job(sleeper).worker_id)

    wait_until(holding, 2.0, "the worker to hold the job after the sleeper")
    os.kill(first["pid"], signal.SIGKILL)

    jobs = engine.wait_all([*quick, sleeper, *after], FINISHED, timeout=45)
    assert {job.status for job in jobs.values()} == {JobState.COMPLETED}
    assert (jobs[sleeper].attempts, jobs[sleeper].recoveries) == (1, 1)  # it ran when killed
    assert {(jobs[i].attempts, jobs[i].recoveries) for i in quick + after} == {(1, 0)}
    started = Counter(entry["id"] for entry in journal.entries("start"))
    assert {i: started[i] for i in quick + after} == dict.fromkeys(quick + after, 1)
    assert started[sleeper] == 2
    [released] = workerd.events("job_recovered", job_id=sleeper)
    assert released["job_id"] == sleeper


def test_durable_mode_holds_no_job(r: redis.Redis) -> None:
    # A completion sent ahead has no WAIT after it: in durable mode each is confirmed first.
    durable = Scripts(r, policy=dataclasses.replace(Scripts(r).policy, wait_replicas=1))
    assert not _worker(durable).prefetch
    assert _worker(Scripts(r)).prefetch


def test_a_cluster_holds_no_job(r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    # A completion sent ahead is a bare EVALSHA on one connection: no cluster routing.
    monkeypatch.setattr("workerd.worker.is_cluster", lambda client: True)
    assert not _worker(Scripts(r)).prefetch


def test_quiet_is_reported_only_once_the_claiming_completion_in_flight_is_read(
    scripts: Scripts,
) -> None:
    # The claim lock is held from sending a completion that claims to reading its reply, so
    # the supervisor's quiet (which passes every lock) waits for that read, as it waits for a
    # claim without holding: once /health says quiet, no claim of this host answers.
    ids = _enqueue(scripts, SHORT, 10)
    table = SlotTable(1)
    probe["worker"] = b"w-fenced"
    settings = Settings.from_env({"WORKER_PREFETCH": "on"})
    worker = WorkerProcess(settings, scripts, table.slot(0), "w-fenced", os.getppid())
    run_until(worker, lambda: worker.jobs_done == 4)
    assert worker.inflight is not None and worker.inflight.claims

    table.publish_status(1, True, True, quiet=True)
    assert not table.quiet()  # the claim in flight may still answer

    worker.step()  # reads it (quiet now: the job it claimed goes back), claims nothing more
    table.publish_status(1, True, True, quiet=True)
    assert table.quiet()
    assert worker.inflight is None
    assert scripts.redis.zcard(scripts.q("default").processing) == 0
    done = [i for i in ids if job_hash(scripts, i)[b"status"] == b"completed"]
    assert len(done) == worker.jobs_done


def test_a_held_job_that_runs_long_has_the_completion_before_it_recorded_meanwhile(
    scripts: Scripts,
) -> None:
    # The job after `before` is held: it starts with `before`'s completion in flight, and runs
    # until that completion is recorded. Read only at its end, as before READ_LATE, it would
    # wait for itself (and a SIGKILL meanwhile would lose the line and counts for good).
    first = _enqueue(scripts, SHORT, 3)
    before = first[-1]
    request = validate_enqueue({"type": SHORT, "payload": {"await_recorded": before}})
    waits = scripts.enqueue(request, str(uuid.uuid4())).job_id
    after = _enqueue(scripts, SHORT, 2)
    table = SlotTable(1)  # a real claim lock: the flusher's read gives it back
    probe["worker"], probe["recorded"] = b"w-late", set()
    settings = Settings.from_env({"WORKER_PREFETCH": "on"})
    worker = WorkerProcess(settings, scripts, table.slot(0), "w-late", os.getppid())
    log_completion = worker.acks.log_completion

    def recording(job: Job, *args: Any, **kwargs: Any) -> None:
        log_completion(job, *args, **kwargs)
        seen.append(("recorded", job.id, frozenset()))
        probe["recorded"].add(job.id)

    worker.acks.log_completion = recording  # type: ignore[method-assign]
    ran: list[BaseException] = []

    def drain() -> None:
        try:
            run_until(worker, lambda: worker.jobs_done == 6)
            worker._hand_back_unstarted_job()
        except BaseException as exc:  # raised in the test's thread below
            ran.append(exc)

    # On a thread: a claim lock never given back would block the next step for good.
    stepping = threading.Thread(target=drain, daemon=True)
    stepping.start()
    stepping.join(timeout=30)
    assert not stepping.is_alive(), "the worker hung (its claim lock never given back?)"
    assert not ran, ran
    assert_each_completed_once(scripts, [*first, waits, *after])
    order = [(event, job_id) for event, job_id, _ in seen]
    # It started with `before`'s completion in flight, recorded while it ran.
    assert order.index(("start", waits)) < order.index(("recorded", before))
    assert worker.flusher is not None and worker.flusher.wakes > 0
    table.publish_status(1, True, True, quiet=True)
    assert table.quiet()  # the claim lock is free: neither held nor released twice


@pytest.mark.parametrize("queues", ["default", "default,other"])
def test_an_idle_worker_waits_for_work_on_the_connection_it_kept(
    scripts: Scripts, queues: str
) -> None:
    # Its calls keep one connection (ScriptTransport's lanes); its idle BLPOP takes that one
    # rather than a second: one connection a job thread, busy or idle. On one queue the wait
    # sends its claim behind the BLPOP on that connection itself (the lane keeps it); on two,
    # the BLPOP takes it back from the pool.
    ids = _enqueue(scripts, SHORT, 3)
    worker = _worker(scripts, WORKER_QUEUES=queues)
    run_until(worker, lambda: worker.jobs_done == 3)
    worker._hand_back_unstarted_job()
    kept = scripts.transport._lanes.conn
    assert kept is not None
    pool = scripts.redis.connection_pool
    made = pool._created_connections
    scripts.redis.delete(scripts.q("default").wake)
    worker.planner.claim_now = False
    worker._wait_for_work()  # no hint comes: one wake timeout
    if queues == "default":
        assert scripts.transport._lanes.conn is kept
    else:
        assert scripts.transport._lanes.conn is None
        assert kept in pool._available_connections
    assert pool._created_connections == made
    assert_each_completed_once(scripts, ids)


class _StallClock:
    """workerd.worker's `time`: the real one, but for a monotonic clock a test moves on."""

    def __init__(self) -> None:
        self.skew = 0.0
        self.perf_counter, self.sleep = time.perf_counter, time.sleep

    def monotonic(self) -> float:
        return time.monotonic() + self.skew


@pytest.mark.parametrize("prefetch", ["on", "off"])
def test_a_job_claimed_before_a_stall_past_half_its_lease_is_handed_back_not_run(
    scripts: Scripts,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    prefetch: str,
) -> None:
    """Scenario 4's third case: the process stalls (SIGSTOP, a paused VM) between sending a
    claim and starting its job. Not yet running, the job's lease is not renewed; a scheduler
    may recover it meanwhile and another worker run it, so the stalled worker must not run it
    as well once it wakes: it hands the job back (its release refused if it was recovered)."""
    clock = _StallClock()
    monkeypatch.setattr("workerd.worker.time", clock)
    real_claim = scripts.claim
    stalls = {"left": 1}

    def stalled_claim(*args: Any, **kwargs: Any) -> Any:
        job = real_claim(*args, **kwargs)
        if stalls["left"]:
            stalls["left"] -= 1
            clock.skew += 60.0  # the reply read a minute after the claim was sent
        return job

    monkeypatch.setattr(scripts, "claim", stalled_claim)
    [job_id] = _enqueue(scripts, SHORT, 1)
    worker = _worker(scripts, WORKER_PREFETCH=prefetch)
    handed_back = _count_hand_backs(worker)
    counted = stalls_counted(queue="default", release="done")
    worker.step()
    assert handed_back == [job_id] and seen == []
    assert job_hash(scripts, job_id)[b"status"] == b"pending"
    assert too_old_lines(caplog) == [(job_id, "done", 0)]
    assert stalls_counted(queue="default", release="done") == counted + 1
    run_until(worker, lambda: worker.jobs_done == 1)
    assert [job for _, job, _ in seen] == [job_id]
    assert_each_completed_once(scripts, [job_id])


@pytest.mark.parametrize("prefetch", ["on", "off"])
def test_a_job_claimed_with_a_completion_before_a_stall_is_handed_back_not_run(
    scripts: Scripts, monkeypatch: pytest.MonkeyPatch, prefetch: str
) -> None:
    # The same stall between a completion that claimed the next job and that job's start.
    clock = _StallClock()
    monkeypatch.setattr("workerd.worker.time", clock)
    ids = _enqueue(scripts, SHORT, 3)
    worker = _worker(scripts, WORKER_PREFETCH=prefetch)
    started = worker.slot.start_job

    def stalled_start(*args: Any, **kwargs: Any) -> Any:
        if args[0] == ids[1] and not handed_back:
            raise AssertionError("the second job started after the stall")
        return started(*args, **kwargs)

    handed_back = _count_hand_backs(worker)
    run_until(worker, lambda: worker.jobs_done == 1)  # the first job's completion claimed the next
    clock.skew += 60.0  # stalled before the second starts
    monkeypatch.setattr(worker.slot, "start_job", stalled_start)
    run_until(worker, lambda: bool(handed_back))
    # A claim sent ahead of the job handed back (prefetch) was read, its job handed back too:
    # nothing left in flight, holding a job and the claim lock while the worker idles.
    assert worker.inflight is None
    run_until(worker, lambda: worker.jobs_done == 3)
    worker._hand_back_unstarted_job()
    assert ids[1] in handed_back
    assert [job for _, job, _ in seen] == ids  # each ran once, in order
    assert_each_completed_once(scripts, ids)
