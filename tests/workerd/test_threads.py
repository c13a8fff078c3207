"""WORKER_THREADS: several jobs at once in one worker process, end to end (a real workerd,
a real Redis, real signals and kills).

Each test proves what it claims from the jobs' own notes (tests/workerd/handlers_threads.py)
and from Redis: overlap by a rendezvous that only ends if the jobs ran at once (not by
timing), renewals by jobs outliving several leases, a sibling's fate by its recoveries.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from shared.engine import history
from shared.model.jobs import Job, JobState
from tests.support.tools import wait_until
from tests.support.workerd import Workerd
from tests.workerd.conftest import HANDLERS, Engine

QUIET_WINDOW = 1.0  # seconds a quiet host is watched for a claim it must not make
THREAD_HANDLERS = HANDLERS + ",tests.workerd.handlers_threads,tests.workerd.handlers_cancel"


def notes(path: Path, event: str | None = None, job_id: str | None = None) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().split("\n")[:-1] if line.strip()]
    return [
        n
        for n in lines
        if (event is None or n["event"] == event) and (job_id is None or n["id"] == job_id)
    ]


def wait_starts(path: Path, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
    def seen() -> list[dict[str, Any]]:
        found = notes(path, "start")
        return found if len(found) >= count else []

    return wait_until(seen, timeout, f"{count} job starts")


def threaded(start_workerd: Callable[..., Workerd], threads: int, **env: str) -> Workerd:
    return start_workerd(
        TASKFORGE_HANDLERS=THREAD_HANDLERS,
        WORKER_COUNT="1",
        WORKER_THREADS=str(threads),
        **env,
    )


def claimed_by(r: redis.Redis, engine: Engine, job_id: str) -> str:
    kept = history.read(r, engine.keys, job_id, "default")
    assert kept is not None
    return next(e.worker for e in kept.entries if e.event == "claimed") or ""


def test_a_process_runs_its_threads_jobs_at_once_each_under_its_own_worker_id(
    start_workerd: Callable[..., Workerd], engine: Engine, tmp_path: Path, r: redis.Redis
) -> None:
    workerd = threaded(start_workerd, 4)
    file = tmp_path / "notes"
    payload = {"file": str(file), "count": 4}
    ids = [engine.enqueue("rendezvous", payload) for _ in range(4)]

    jobs = engine.wait_all(ids, {JobState.COMPLETED, JobState.DEAD, JobState.RETRYING}, 15)

    # Each ended only once all four had started: they ran at the same time.
    assert {j.status for j in jobs.values()} == {JobState.COMPLETED}, [
        j.last_error for j in jobs.values()
    ]
    started = notes(file, "start")
    assert len({n["pid"] for n in started}) == 1  # one process
    assert len({n["thread"] for n in started}) == 4  # four threads
    [worker] = workerd.children("worker")
    names = {claimed_by(r, engine, job_id) for job_id in ids}
    assert len(names) == 4 and {n.rsplit(".t", 1)[1] for n in names} == set("0123"), names
    assert {n["pid"] for n in started} == {worker}
    workerd.wait_for("worker_started", count=4)


def test_every_threads_lease_is_renewed(
    start_workerd: Callable[..., Workerd], engine: Engine, tmp_path: Path
) -> None:
    threaded(start_workerd, 3)  # TASK_VISIBILITY_TIMEOUT=1s: each job outlives 3 leases
    file = tmp_path / "notes"
    ids = [engine.enqueue("noted_sleep", {"file": str(file), "seconds": 3}) for _ in range(3)]

    jobs = engine.wait_all(ids, {JobState.COMPLETED}, 20)

    assert all((j.attempts, j.recoveries) == (1, 0) for j in jobs.values())
    assert sorted(n["id"] for n in notes(file, "start")) == sorted(ids)  # none ran twice
    assert len({n["thread"] for n in notes(file, "start")}) == 3


def assert_back_uncounted_and_completed_once(
    r: redis.Redis, engine: Engine, file: Path, job_id: str, job: Job
) -> None:
    """A sibling of a job its process was killed for: given back uncounted, run again, and
    completed exactly once."""
    assert job.recoveries == 0  # killed for no fault of its own: not counted
    assert len(notes(file, "start", job_id)) == 2  # run again ...
    assert len(notes(file, "end", job_id)) == 1  # ... and completed exactly once
    kept = history.read(r, engine.keys, job_id, "default")
    assert kept is not None
    events = [e.event for e in kept.entries]
    assert events == ["enqueued", "claimed", "released", "claimed", "completed"], events


def test_a_timeout_kills_the_process_and_its_siblings_go_back_uncounted(
    start_workerd: Callable[..., Workerd], engine: Engine, tmp_path: Path, r: redis.Redis
) -> None:
    workerd = threaded(start_workerd, 3)
    file = tmp_path / "notes"
    slow = engine.enqueue(
        "noted_sleep", {"file": str(file), "seconds": 30}, timeout=1.0, max_retries=1
    )
    wait_starts(file, 1)
    siblings = [engine.enqueue("noted_sleep", {"file": str(file), "seconds": 3}) for _ in range(2)]
    wait_starts(file, 3)

    dead = engine.wait_for(slow, JobState.DEAD, 15)
    done = engine.wait_all(siblings, {JobState.COMPLETED}, 20)

    assert dead.last_error == "Timeout: timed out after 1s; its worker was killed"
    assert dead.recoveries == 0
    for job_id, job in done.items():
        assert_back_uncounted_and_completed_once(r, engine, file, job_id, job)
    killed = workerd.events("child_killed", reason="timeout")
    assert [k["job_id"] for k in killed] == [slow]
    assert workerd.events("job_recovered") == []


def cancel_beside_a_sibling(
    engine: Engine, tmp_path: Path, target_type: str, sibling_seconds: float
) -> tuple[str, str]:
    """Start a sibling job, then a `target_type` job in the other thread; cancel the target and
    wait until it is canceled; return (sibling id, target id)."""
    file, cancel_file = tmp_path / "notes", tmp_path / "cancel_notes"
    sibling = engine.enqueue("noted_sleep", {"file": str(file), "seconds": sibling_seconds})
    wait_starts(file, 1)
    target = engine.enqueue(target_type, {"file": str(cancel_file)})
    wait_until(lambda: notes(cancel_file, "start"), 10, f"the {target_type} job's start")
    engine.scripts.cancel(target, by="test")
    engine.wait_for(target, JobState.CANCELED, timeout=10)
    return sibling, target


def test_a_cancel_stops_one_threads_job_and_leaves_its_siblings_running(
    start_workerd: Callable[..., Workerd], engine: Engine, tmp_path: Path
) -> None:
    workerd = threaded(start_workerd, 2, WORKER_CANCEL_GRACE="5s")
    file, cancel_file = tmp_path / "notes", tmp_path / "cancel_notes"

    sibling, target = cancel_beside_a_sibling(engine, tmp_path, "cancel_sleeper", 2)

    job = engine.wait_for(sibling, JobState.COMPLETED, timeout=10)

    assert notes(cancel_file, "unwound")  # JobCanceled unwound the sleeper's own thread
    assert job.recoveries == 0 and len(notes(file, "start", sibling)) == 1
    workerd.wait_for("job_canceled", job_id=target, stopped="sigterm")
    assert workerd.events("child_killed") == []
    [pid] = {n["pid"] for n in notes(file) + notes(cancel_file)}
    assert workerd.children("worker") == [pid]  # the process lives on


def test_a_cancel_past_its_grace_kills_the_process_and_the_sibling_goes_back_uncounted(
    start_workerd: Callable[..., Workerd], engine: Engine, tmp_path: Path
) -> None:
    workerd = threaded(start_workerd, 2, WORKER_CANCEL_GRACE="500ms")
    file = tmp_path / "notes"

    sibling, target = cancel_beside_a_sibling(engine, tmp_path, "cancel_stubborn", 3)

    job = engine.wait_for(sibling, JobState.COMPLETED, timeout=15)

    workerd.wait_for("job_canceled", job_id=target, stopped="sigkill")
    assert job.recoveries == 0
    assert len(notes(file, "start", sibling)) == 2 and len(notes(file, "end", sibling)) == 1


def test_a_drain_lets_every_thread_finish_its_job(
    start_workerd: Callable[..., Workerd], engine: Engine, tmp_path: Path
) -> None:
    workerd = threaded(start_workerd, 3, WORKER_DRAIN_GRACE="10s")
    file = tmp_path / "notes"
    ids = [engine.enqueue("noted_sleep", {"file": str(file), "seconds": 1.5}) for _ in range(3)]
    wait_starts(file, 3)
    later = engine.enqueue("noted_sleep", {"file": str(file), "seconds": 0})

    workerd.signal(signal.SIGTERM)

    assert workerd.wait_exit(timeout=15) == 0
    jobs = engine.wait_all(ids, {JobState.COMPLETED}, 1)
    assert all(j.recoveries == 0 for j in jobs.values())
    assert engine.job(later).status is JobState.PENDING  # no thread claimed after the drain
    assert len(workerd.events("worker_stopped")) == 3


@pytest.mark.parametrize("limit", [4])
def test_recycling_counts_the_jobs_of_the_whole_process(
    start_workerd: Callable[..., Workerd], engine: Engine, tmp_path: Path, limit: int
) -> None:
    workerd = threaded(start_workerd, 2, WORKER_MAX_JOBS=str(limit))
    file = tmp_path / "notes"
    ids = [engine.enqueue("noted_sleep", {"file": str(file), "seconds": 0.05}) for _ in range(12)]

    engine.wait_all(ids, {JobState.COMPLETED}, 20)

    pids = [n["pid"] for n in notes(file, "start")]
    per_process = {pid: pids.count(pid) for pid in pids}
    # A process stops claiming at the limit; a job each thread already claimed with its
    # complete is handed back, so no process runs more than the limit plus one per thread.
    assert len(per_process) >= 12 // (limit + 2), per_process
    assert max(per_process.values()) <= limit + 1, per_process
    assert workerd.events("worker_process_stopped")


def test_a_death_nobody_can_attribute_marks_the_jobs_which_then_run_alone(
    start_workerd: Callable[..., Workerd], engine: Engine, tmp_path: Path, r: redis.Redis
) -> None:
    # Three jobs start together, then the process dies by a SIGKILL the supervisor did not
    # send (a segfault or the OOM killer, as far as it can tell). Which job killed it? Each
    # goes back uncounted and marked; alone in its process, each kills it once more (now its
    # own death: counted), then, with one recovery, completes.
    workerd = threaded(start_workerd, 3)
    file = tmp_path / "notes"
    payload = {"file": str(file), "after": 3, "until": 1}
    ids = [engine.enqueue("noted_crash", payload) for _ in range(3)]

    jobs = engine.wait_all(ids, {JobState.COMPLETED, JobState.DEAD}, 40)

    assert all((j.status, j.recoveries) == (JobState.COMPLETED, 1) for j in jobs.values())
    for job_id in ids:
        kept = history.read(r, engine.keys, job_id, "default")
        assert kept is not None
        events = [e.event for e in kept.entries]
        assert events[:3] == ["enqueued", "claimed", "released"], events
        assert events.count("recovered") == 1 and events[-1] == "completed", events
        assert r.hget(engine.keys.job(job_id), "alone") == b"1"
    started = notes(file, "start")
    first = started[0]["pid"]
    assert [n["pid"] for n in started[:3]] == [first] * 3  # together, in one process
    # Marked, no job ever started beside another in its process: each later process that
    # died (a start without an end) started exactly one job.
    ended = {(n["pid"], n["id"]) for n in notes(file, "end")}
    unfinished = [(n["pid"], n["id"]) for n in started[3:] if (n["pid"], n["id"]) not in ended]
    assert len(unfinished) == 3, started  # each marked job's own death
    assert len({pid for pid, _ in unfinished}) == 3, started  # ... each in its own process
    assert len(workerd.events("worker_waits_alone")) >= 3


def test_a_quiet_host_claims_in_no_thread_and_resumes_in_all(
    start_workerd: Callable[..., Workerd], engine: Engine, tmp_path: Path
) -> None:
    workerd = threaded(start_workerd, 3)
    file = tmp_path / "notes"
    running = engine.enqueue("noted_sleep", {"file": str(file), "seconds": 1})
    wait_starts(file, 1)

    workerd.signal(signal.SIGTSTP)

    def health_quiet() -> bool:
        status, _, body = workerd.http("/health")
        return status == 200 and json.loads(body).get("quiet") is True

    # /health says quiet only once every thread's claim lock was passed (workerd.slots).
    wait_until(health_quiet, 5, "/health quiet")
    waiting = [engine.enqueue("demo.noop") for _ in range(3)]  # one per thread
    engine.wait_for(running, JobState.COMPLETED)  # the running job finished
    deadline = time.monotonic() + QUIET_WINDOW
    while time.monotonic() < deadline:  # and no thread claims
        assert all(engine.job(job_id).status is JobState.PENDING for job_id in waiting)
        time.sleep(0.05)
    assert [e for e in workerd.events("job_claimed") if e.get("job_id") in waiting] == []

    workerd.signal(signal.SIGCONT)

    engine.wait_all(waiting, {JobState.COMPLETED}, 10)


def test_jobs_longer_than_the_drain_grace_go_back_uncounted_from_every_thread(
    start_workerd: Callable[..., Workerd], engine: Engine, tmp_path: Path
) -> None:
    workerd = threaded(start_workerd, 2, WORKER_DRAIN_GRACE="1s")
    file = tmp_path / "notes"
    ids = [engine.enqueue("noted_sleep", {"file": str(file), "seconds": 30}) for _ in range(2)]
    wait_starts(file, 2)

    workerd.signal(signal.SIGTERM)

    assert workerd.wait_exit(timeout=15) == 0
    jobs = engine.wait_all(ids, {JobState.PENDING}, 5)
    assert all((j.attempts, j.recoveries) == (0, 0) for j in jobs.values())
    assert [e["reason"] for e in workerd.events("child_killed")] == ["drain grace over"]


def take_over(engine: Engine, job_id: str, token: int) -> bool:
    """Have the job's lease run out and a scheduler recover it (its token moves on), as when
    its host seemed gone; True once its token is no longer `token`.

    The lease is ended by hand (its deadline set in the past) and recover.lua called: a
    renewal landing in between writes the deadline back, and the next call tries again.
    """
    if engine.job(job_id).token != token:
        return True  # recovered (by us or by workerd's scheduler, which runs the same script)
    engine.redis.zadd(engine.keys.processing, {job_id: 1}, xx=True)
    engine.scripts.recover()
    return engine.job(job_id).token != token


def test_a_lost_lease_kills_the_process_its_job_is_not_written_and_siblings_go_back_uncounted(
    start_workerd: Callable[..., Workerd], engine: Engine, tmp_path: Path, r: redis.Redis
) -> None:
    # Three threads each run a job; one job's lease is lost (recovered: its token moves on).
    # The supervisor's renewal is refused for that job alone: it kills the process. The lost
    # job is no longer this worker's (nothing written with its stale token: its run never
    # ends, no release of it); the two siblings go back uncounted and complete exactly once.
    workerd = threaded(start_workerd, 3)
    file = tmp_path / "notes"
    victim = engine.enqueue("noted_first_hold", {"file": str(file), "seconds": 30})
    wait_starts(file, 1)
    siblings = [engine.enqueue("noted_sleep", {"file": str(file), "seconds": 3}) for _ in range(2)]
    [first] = {n["pid"] for n in wait_starts(file, 3)}
    held = engine.job(victim)

    wait_until(lambda: take_over(engine, victim, held.token), 10, "the victim's lease taken over")

    done = engine.wait_all([victim, *siblings], {JobState.COMPLETED}, 20)
    assert [e["job_id"] for e in workerd.events("lease_lost")] == [victim]
    [exited] = workerd.events("child_exited", child_pid=first)
    assert exited["killed_for"] == "lease lost", exited
    # The lost job: its run in the killed process never ended, the run after the takeover did.
    runs = notes(file, job_id=victim)
    assert [(n["event"], n["pid"] == first) for n in runs] == [
        ("start", True),
        ("start", False),
        ("end", False),
    ], runs
    assert done[victim].recoveries == 1  # the takeover's own recovery, no other
    kept = history.read(r, engine.keys, victim, "default")
    assert kept is not None
    events = [e.event for e in kept.entries]
    assert events == ["enqueued", "claimed", "recovered", "claimed", "completed"], events
    for job_id in siblings:
        assert_back_uncounted_and_completed_once(r, engine, file, job_id, done[job_id])
    # The one recovery is the takeover's (workerd's scheduler may be the one that made it).
    assert {e["job_id"] for e in workerd.events("job_recovered")} <= {victim}


def wait_alone_beside(
    workerd: Workerd, engine: Engine, r: redis.Redis, file: Path, sibling: dict[str, Any]
) -> tuple[str, str, int]:
    """Start the `sibling` job, then a job marked to run alone, which waits at the gate for
    it; return (sibling id, marked id, the process's pid)."""
    sibling_id = engine.enqueue(sibling.pop("type"), {"file": str(file), **sibling})
    [pid] = {n["pid"] for n in wait_starts(file, 1)}
    engine.scripts.pause_queue("default")  # so that it is marked before any thread claims it
    marked = engine.enqueue("noted_sleep", {"file": str(file), "seconds": 0})
    r.hset(engine.keys.job(marked), "alone", "1")  # as release_worker.lua's isolate leaves it
    engine.scripts.resume_queue("default")
    workerd.wait_for("worker_waits_alone", job_id=marked)
    return sibling_id, marked, pid


def test_a_cancel_of_a_job_waiting_to_run_alone_ends_it_canceled_without_running_it(
    start_workerd: Callable[..., Workerd], engine: Engine, tmp_path: Path, r: redis.Redis
) -> None:
    # A job marked to run alone waits at its process's gate while a sibling runs (the sibling
    # ends only once another job starts beside it). Its cancel must end it canceled at once,
    # unrun; with a grace far past the waits below, a kill could not be what ends it.
    workerd = threaded(start_workerd, 2, WORKER_CANCEL_GRACE="60s")
    file = tmp_path / "notes"
    rendezvous = {"type": "rendezvous", "count": 2, "max_seconds": 30}
    sibling, marked, first = wait_alone_beside(workerd, engine, r, file, rendezvous)

    engine.scripts.cancel(marked, by="test")

    engine.wait_for(marked, JobState.CANCELED, timeout=10)
    workerd.wait_for("job_canceled", job_id=marked, stopped="sigterm")
    later = engine.enqueue("noted_sleep", {"file": str(file), "seconds": 0})  # frees the sibling
    done = engine.wait_all([sibling, later], {JobState.COMPLETED}, 20)
    assert notes(file, job_id=marked) == []  # its handler never ran
    kept = history.read(r, engine.keys, marked, "default")
    assert kept is not None
    assert [e.event for e in kept.entries] == [
        "enqueued",
        "claimed",
        "cancel_requested",
        "canceled",
    ]
    assert kept.entries[-1].stopped == "sigterm"
    assert done[sibling].recoveries == 0 and len(notes(file, "start", sibling)) == 1
    assert workerd.events("child_killed") == []
    assert workerd.children("worker") == [first]  # the process lives on


def test_a_drain_hands_back_a_job_waiting_to_run_alone_unrun(
    start_workerd: Callable[..., Workerd], engine: Engine, tmp_path: Path, r: redis.Redis
) -> None:
    # Draining, a process starts no job: the marked job waiting for its sibling goes back at
    # once, unrun and uncounted, while the sibling finishes its own.
    workerd = threaded(start_workerd, 2, WORKER_DRAIN_GRACE="30s")
    file = tmp_path / "notes"
    sleeper = {"type": "noted_sleep", "seconds": 5}
    sibling, marked, pid = wait_alone_beside(workerd, engine, r, file, sleeper)

    workerd.signal(signal.SIGTERM)

    assert workerd.wait_exit(timeout=20) == 0
    assert engine.wait_for(sibling, JobState.COMPLETED, 1).recoveries == 0
    back = engine.job(marked)
    assert (back.status, back.attempts, back.recoveries) == (JobState.PENDING, 0, 0)
    assert notes(file, job_id=marked) == []  # never started
    # Handed back by its own thread (not released by the supervisor after a kill at the grace).
    assert [e["pid"] for e in workerd.events("job_released", job_id=marked)] == [pid]
    assert workerd.events("child_killed") == []


def test_a_process_whose_every_thread_runs_a_job_longer_than_the_silence_limit_lives(
    start_workerd: Callable[..., Workerd], engine: Engine, tmp_path: Path
) -> None:
    # No slot beats between jobs for 3 s, three times WORKER_HEARTBEAT_TIMEOUT: each job's
    # slot is timed by its job (here its 20 s timeout), not by silence (docs/WORKERD.md).
    workerd = threaded(start_workerd, 2, WORKER_HEARTBEAT_TIMEOUT="1s")
    file = tmp_path / "notes"
    ids = [
        engine.enqueue("noted_sleep", {"file": str(file), "seconds": 3}, timeout=20)
        for _ in range(2)
    ]
    [first] = {n["pid"] for n in wait_starts(file, 2)}

    jobs = engine.wait_all(ids, {JobState.COMPLETED}, 20)

    assert all((j.attempts, j.recoveries) == (1, 0) for j in jobs.values())
    assert workerd.events("child_silent") == [] and workerd.events("child_killed") == []
    assert workerd.children("worker") == [first]


def test_a_job_that_waited_to_run_alone_past_half_its_lease_still_runs(
    start_workerd: Callable[..., Workerd], engine: Engine, tmp_path: Path, r: redis.Redis
) -> None:
    # A job is aged from its claim as it would start (a stalled process hands back one too
    # old to trust its lease), but a job waiting at the gate is shown in its slot and renewed:
    # its age is asked before the wait, and it runs once its sibling is done, not handed back.
    workerd = threaded(start_workerd, 2, TASK_VISIBILITY_TIMEOUT="2s")
    file = tmp_path / "notes"
    sleeper = {"type": "noted_sleep", "seconds": 3}  # the wait: past half the 2 s lease
    sibling, marked, pid = wait_alone_beside(workerd, engine, r, file, sleeper)

    done = engine.wait_all([sibling, marked], {JobState.COMPLETED}, 20)
    assert done[marked].recoveries == 0 and done[marked].attempts == 1
    assert [n["pid"] for n in notes(file, "start", marked)] == [pid]
    assert workerd.events("job_released", job_id=marked) == []
    assert workerd.events("job_recovered") == []


def test_a_thread_stuck_between_jobs_beside_a_beating_one_drains_its_process(
    start_workerd: Callable[..., Workerd], engine: Engine, tmp_path: Path
) -> None:
    # Thread 1 stands still between jobs (tests/workerd/handlers_stuck.py) while thread 2
    # beats between jobs: the process is not silent, but runs a thread short for good. The
    # supervisor drains it (thread 0's job ends as ever), then kills and replaces it.
    flag = tmp_path / "stuck"
    workerd = start_workerd(
        TASKFORGE_HANDLERS=THREAD_HANDLERS + ",tests.workerd.handlers_stuck",
        TASKFORGE_TEST_STUCK_FLAG=str(flag),
        WORKER_COUNT="1",
        WORKER_THREADS="3",
        WORKER_HEARTBEAT_TIMEOUT="2s",
        WORKER_DRAIN_GRACE="20s",
    )
    [worker] = workerd.children("worker")
    flag.touch()
    wait_until(lambda: Path(f"{flag}.stuck").exists(), 10, "thread 1 to stick")
    file = tmp_path / "notes"
    running = engine.enqueue("noted_sleep", {"file": str(file), "seconds": 7})
    wait_starts(file, 1)

    [stuck] = workerd.wait_for("child_thread_stuck", timeout=10)  # twice the 2 s limit
    flag.unlink()  # the replacement's thread 1 runs
    assert stuck["worker_id"].endswith(".t1")
    [exited] = workerd.wait_for("child_exited", child_pid=worker, timeout=15)
    assert exited["killed_for"] == "stuck"
    job = engine.job(running)
    assert (job.status, job.attempts, job.recoveries) == (JobState.COMPLETED, 1, 0)
    assert workerd.events("child_silent") == []
    # The replacement serves.
    after = engine.enqueue("noted_sleep", {"file": str(file), "seconds": 0})
    assert engine.wait_all([after], {JobState.COMPLETED}, 10)[after].attempts == 1
    assert [p for p in workerd.children("worker") if p != worker]


@pytest.mark.parametrize("stop", ["recycling", "drain"])
def test_a_thread_that_stopped_does_not_make_its_process_silent_while_a_sibling_runs(
    start_workerd: Callable[..., Workerd], engine: Engine, tmp_path: Path, stop: str
) -> None:
    # One thread's loop ends (the process recycles after one job, or drains) while the other
    # runs a 5 s job under a 2 s WORKER_HEARTBEAT_TIMEOUT (above the 1 s idle wait, in which a
    # thread between jobs does not beat). A thread that has stopped beats no more, yet the
    # process lives: the long job must end as ever, not be killed as silent.
    workerd = threaded(
        start_workerd,
        2,
        WORKER_HEARTBEAT_TIMEOUT="2s",
        WORKER_MAX_JOBS="1" if stop == "recycling" else "0",
        WORKER_DRAIN_GRACE="20s",
    )
    [worker] = workerd.children("worker")
    file = tmp_path / "notes"
    long = engine.enqueue("noted_sleep", {"file": str(file), "seconds": 5}, timeout=20)
    wait_starts(file, 1)
    if stop == "recycling":
        quick = engine.enqueue("noted_sleep", {"file": str(file), "seconds": 0})
        engine.wait_all([quick], {JobState.COMPLETED}, 10)
    else:
        workerd.signal(signal.SIGTERM)

    job = engine.wait_all([long], {JobState.COMPLETED, JobState.PENDING}, 20)[long]
    assert (job.status, job.attempts, job.recoveries) == (JobState.COMPLETED, 1, 0)
    assert workerd.events("child_silent") == []
    [exited] = workerd.wait_for("child_exited", child_pid=worker, timeout=10)
    assert exited["killed_for"] is None
