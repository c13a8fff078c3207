"""Workers that die, hang, time out or refuse to boot: real processes, real signals, real Redis."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections import Counter
from collections.abc import Callable

import pytest
import redis

from shared.engine import history
from shared.model.jobs import JobState
from tests.support.tools import wait_until
from tests.support.workerd import Workerd
from tests.workerd.conftest import Engine, Journal

FINISHED = (JobState.COMPLETED, JobState.DEAD)


def test_sigkilled_worker_gives_its_job_back_within_a_second(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal
) -> None:
    workerd = start_workerd(WORKER_COUNT="2")
    job_id = engine.enqueue("journal", {"file": journal.file, "sleep": 1.0})
    [first] = journal.wait_for("start", job_id)
    assert first["pid"] in workerd.children("worker")
    token = engine.job(job_id).token

    os.kill(first["pid"], signal.SIGKILL)
    killed_at = time.monotonic()

    def requeued() -> bool:
        job = engine.job(job_id)
        return job.recoveries == 1 and (job.status is JobState.PENDING or job.token != token)

    wait_until(requeued, 2.0, "the killed worker's job to be requeued")
    latency = time.monotonic() - killed_at
    print(f"\nkill → requeue latency: {latency * 1000:.1f} ms")
    assert latency < 1.0, f"requeued {latency:.3f}s after the kill"

    job = engine.wait_for(job_id, JobState.COMPLETED, timeout=10)
    assert (job.attempts, job.recoveries) == (1, 1)  # the lost attempt was given back
    starts = journal.entries("start", job_id)
    assert [s["attempt"] for s in starts] == [1, 1]
    assert [s["recoveries"] for s in starts] == [0, 1]
    [end] = journal.entries("end", job_id)
    assert end["pid"] != first["pid"]
    [exited] = workerd.events("child_exited", child_pid=first["pid"])
    assert exited["cause"].startswith("killed by SIGKILL")
    workerd.wait_for("job_recovered", job_id=job_id)
    wait_until(lambda: len(workerd.children("worker")) == 2, 5, "a replacement worker")


def test_poison_pill_is_dead_at_the_recovery_cap_while_other_jobs_complete(
    start_workerd: Callable[..., Workerd], engine: Engine
) -> None:
    start_workerd(WORKER_COUNT="2", TASK_MAX_RECOVERIES="2")
    normal = [engine.enqueue("demo.noop") for _ in range(25)]
    pill = engine.enqueue("demo.crash")
    normal += [engine.enqueue("demo.noop") for _ in range(25)]

    jobs = engine.wait_all([*normal, pill], FINISHED, timeout=30)

    dead = jobs[pill]
    assert dead.status is JobState.DEAD
    assert dead.recoveries == 3
    assert dead.last_error is not None
    assert "recovery cap 2" in dead.last_error and "worker lost 3 times" in dead.last_error
    assert {jobs[i].status for i in normal} == {JobState.COMPLETED}
    assert {(jobs[i].attempts, jobs[i].recoveries) for i in normal} == {(1, 0)}


def test_handler_failures_follow_the_retry_policy_and_never_kill_the_worker(
    start_workerd: Callable[..., Workerd], engine: Engine
) -> None:
    workerd = start_workerd(WORKER_COUNT="1")
    workers = workerd.children("worker")
    failing = engine.enqueue("demo.fail", {"error": "disk full"}, max_retries=3)
    permanent = engine.enqueue("permanent", {"error": "card declined"}, max_retries=3)
    unknown = engine.enqueue("no_such_type", max_retries=2)
    flaky = engine.enqueue("demo.flaky", {"fail_times": 1}, max_retries=3)

    jobs = engine.wait_all([failing, permanent, unknown, flaky], FINISHED, timeout=15)

    assert (jobs[failing].status, jobs[failing].attempts) == (JobState.DEAD, 3)
    assert jobs[failing].last_error == "RuntimeError: disk full"
    assert (jobs[permanent].status, jobs[permanent].attempts) == (JobState.DEAD, 1)
    assert jobs[permanent].last_error == "PermanentError: card declined"
    assert (jobs[unknown].status, jobs[unknown].attempts) == (JobState.DEAD, 2)
    assert jobs[unknown].last_error == "NoHandler: no handler for job type 'no_such_type'"
    assert (jobs[flaky].status, jobs[flaky].attempts) == (JobState.COMPLETED, 2)
    assert len(workerd.events("job_retry_scheduled")) == 2 + 1 + 1
    assert workerd.children("worker") == workers
    assert workerd.events("child_exited") == []


def _sum_seconds_per_item() -> float:
    """Return how long sum(range(n)) takes per item on this machine (best of three)."""
    n = 5_000_000
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        sum(range(n))
        best = min(best, time.perf_counter() - started)
    return best / n


@pytest.mark.slow
def test_gil_holding_job_longer_than_three_leases_keeps_its_lease_and_runs_once(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal
) -> None:
    lease = 1.0
    workerd = start_workerd(WORKER_COUNT="1", TASK_VISIBILITY_TIMEOUT="1s")
    # About 6 s of one C call: load on a shared machine can make it run faster or slower.
    n = int(6.0 * lease / _sum_seconds_per_item())
    job_id = engine.enqueue("gil_hog", {"file": journal.file, "n": n})

    job = engine.wait_for(job_id, FINISHED, timeout=30)

    assert job.status is JobState.COMPLETED, job.last_error
    assert (job.attempts, job.recoveries) == (1, 0)
    [start] = journal.entries("start", job_id)
    [end] = journal.entries("end", job_id)
    held = end["end"] - start["start"]
    print(f"\nGIL held in one C call for {held:.2f} s (lease {lease:g} s)")
    assert held >= 3 * lease, f"the job held the GIL only {held:.2f}s: calibrate n"
    assert workerd.events("job_recovered") == []
    assert workerd.events("lease_lost") == []
    assert workerd.events("child_exited") == []


@pytest.mark.parametrize("source", ["job", "environment"])
def test_job_past_its_timeout_is_killed_failed_and_retried_by_policy(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal, source: str
) -> None:
    payload = {"file": journal.file, "sleep": 30}
    if source == "job":
        workerd = start_workerd(WORKER_COUNT="1")
        job_id = engine.enqueue("journal", payload, timeout=0.5, max_retries=2)
    else:
        workerd = start_workerd(WORKER_COUNT="1", TASK_DEFAULT_TIMEOUT="500ms")
        job_id = engine.enqueue("journal", payload, max_retries=2)

    job = engine.wait_for(job_id, JobState.DEAD, timeout=15)

    assert job.last_error == "Timeout: timed out after 0.5s; its worker was killed"
    assert (job.attempts, job.recoveries) == (2, 0)  # each timeout counted an attempt
    starts = journal.entries("start", job_id)
    assert [s["attempt"] for s in starts] == [1, 2]
    assert journal.entries("end", job_id) == []
    # The supervisor logs each outcome just after writing it to Redis: wait for the line.
    timed_out = wait_until(
        lambda: workerd.events("job_timed_out")[1:] and workerd.events("job_timed_out"),
        5,
        "both timeout outcomes in the log",
    )
    # One job_timed_out line per timeout, with its outcome: the kill itself is a child_killed.
    assert [(r["job_id"], r["result"]) for r in timed_out] == [
        (job_id, "retrying"),
        (job_id, "dead"),
    ]
    killed = workerd.events("child_killed", reason="timeout")
    assert [(r["job_id"], r["timeout_s"]) for r in killed] == [(job_id, 0.5)] * 2
    for start in starts:
        [exited] = workerd.events("child_exited", child_pid=start["pid"])
        assert exited["killed_for"] == "timeout"
        assert exited["cause"].startswith("killed by SIGKILL")
    # One worker at start, one replacement per timeout.
    workerd.wait_for("child_spawned", kind="worker", count=3)
    wait_until(lambda: len(workerd.children("worker")) == 1, 5, "the replacement worker")
    assert workerd.events("job_recovered") == []


def test_children_that_die_at_boot_halt_the_supervisor_with_exit_code_3(
    start_workerd: Callable[..., Workerd],
) -> None:
    workerd = start_workerd(
        wait_ready=False, TASKFORGE_HANDLERS="tests.workerd.boot_failure_handlers"
    )

    assert workerd.wait_exit(timeout=20) == 3
    [halted] = workerd.events("supervisor_halted")
    assert "died before they were up" in halted["reason"]
    assert workerd.events("supervisor_ready") == []
    workerd.wait_no_processes()


def test_handler_module_that_cannot_be_imported_exits_2_with_one_line(
    start_workerd: Callable[..., Workerd],
) -> None:
    workerd = start_workerd(
        wait_ready=False, TASKFORGE_HANDLERS="workerd.demo,tests.workerd.no_such_module"
    )

    assert workerd.wait_exit(timeout=15) == 2
    lines = workerd.stderr().strip().splitlines()
    assert len(lines) == 1, lines
    assert "tests.workerd.no_such_module" in lines[0]
    assert workerd.events("supervisor_started") == []


def test_port_in_use_exits_2_with_one_line(start_workerd: Callable[..., Workerd]) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        workerd = start_workerd(wait_ready=False, PORT_WORKER=str(port))

        assert workerd.wait_exit(timeout=15) == 2
    lines = workerd.stderr().strip().splitlines()
    assert len(lines) == 1, lines
    assert str(port) in lines[0]


def test_workers_are_recycled_after_max_jobs_without_losing_a_job(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal
) -> None:
    workerd = start_workerd(WORKER_COUNT="2", WORKER_MAX_JOBS="5")
    job_ids = [engine.enqueue("journal", {"file": journal.file}) for _ in range(30)]

    jobs = engine.wait_all(job_ids, FINISHED, timeout=30)

    assert {job.status for job in jobs.values()} == {JobState.COMPLETED}
    per_pid = Counter(entry["pid"] for entry in journal.entries("end"))
    assert sum(per_pid.values()) == 30
    assert max(per_pid.values()) <= 5, per_pid
    recycled = workerd.events("worker_stopped", reason="recycled after 5 jobs")
    # The two workers alive at the end may hold up to 4 jobs each: (30 - 2 × 4) / 5 → 5.
    assert len(recycled) >= 5
    worker_exits = workerd.events("child_exited", kind="worker")
    assert {rec["cause"] for rec in worker_exits} == {"exited with code 0"}
    wait_until(lambda: len(workerd.children("worker")) == 2, 5, "replacement workers")
    # Recycling is graceful: no job may be left claimed by a worker that exits.
    recovered = workerd.events("job_recovered")
    assert recovered == [], f"{len(recovered)} jobs waited out their lease after a recycle"
    assert {(job.attempts, job.recoveries) for job in jobs.values()} == {(1, 0)}


def test_a_child_silent_outside_a_job_is_killed_and_replaced(
    start_workerd: Callable[..., Workerd],
) -> None:
    workerd = start_workerd(WORKER_COUNT="1", WORKER_HEARTBEAT_TIMEOUT="3s")
    [worker] = workerd.children("worker")
    os.kill(worker, signal.SIGSTOP)  # idle and frozen: it cannot beat

    workerd.wait_for("child_silent", timeout=10)
    [exited] = workerd.wait_for("child_exited", child_pid=worker, timeout=10)
    assert exited["killed_for"] == "silent"
    wait_until(
        lambda: [p for p in workerd.children("worker") if p != worker], 5, "a replacement worker"
    )


def test_a_worker_killed_holding_a_job_its_slot_never_showed_gives_it_back_at_once(
    start_workerd: Callable[..., Workerd], engine: Engine
) -> None:
    # A worker can die inside its claim (or inside the complete that claims its next job):
    # Redis has given it a job its shared-memory slot does not show yet. Stand in for that
    # moment: freeze the idle worker and claim a job in its name, then kill it. Frozen inside
    # its idle wait, the worker claims it itself: the claim it sent behind its BLPOP runs in
    # Redis as the job's hint lands (workerd.worker, _wait_then_claim).
    workerd = start_workerd(WORKER_COUNT="1", TASK_VISIBILITY_TIMEOUT="30s")
    [worker] = workerd.children("worker")
    [started] = workerd.wait_for("worker_started", pid=worker)
    os.kill(worker, signal.SIGSTOP)
    job_id = engine.enqueue("demo.noop")
    claimed = engine.scripts.claim(started["worker_id"])
    if claimed is None:  # its own claim took it
        held = engine.job(job_id)
        assert held.status is JobState.PROCESSING and held.worker_id == started["worker_id"]
    else:
        assert claimed.id == job_id

    os.kill(worker, signal.SIGKILL)

    # Back and done long before its 30 s lease could expire; it never ran, so it cannot have
    # killed its worker: uncounted.
    job = engine.wait_for(job_id, JobState.COMPLETED, timeout=5)
    assert (job.attempts, job.recoveries) == (1, 0)
    workerd.wait_for("job_released", job_id=job_id, reason="unstarted")


def test_a_worker_killed_running_one_job_and_holding_another_counts_only_the_running_one(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal, r: redis.Redis
) -> None:
    # A worker can die holding a job it never started beside the one it runs: claimed inside
    # the complete it was sending, or claimed ahead. Stand in for that moment: freeze the
    # worker inside its job and claim a second job in its name, then kill it.
    workerd = start_workerd(WORKER_COUNT="1", TASK_VISIBILITY_TIMEOUT="30s")
    [worker] = workerd.children("worker")
    [started] = workerd.wait_for("worker_started", pid=worker)
    running = engine.enqueue("journal", {"file": journal.file, "sleep": 2.0})
    journal.wait_for("start", running)
    os.kill(worker, signal.SIGSTOP)
    assert journal.entries("end", running) == []  # frozen inside it: its slot shows it
    held = engine.enqueue("journal", {"file": journal.file})
    claimed = engine.scripts.claim(started["worker_id"])
    assert claimed is not None and claimed.id == held

    os.kill(worker, signal.SIGKILL)

    jobs = engine.wait_all([running, held], {JobState.COMPLETED}, timeout=15)
    assert (jobs[running].attempts, jobs[running].recoveries) == (1, 1)
    assert (jobs[held].attempts, jobs[held].recoveries) == (1, 0)  # its attempt given back
    workerd.wait_for("job_recovered", job_id=running)
    workerd.wait_for("job_released", job_id=held, reason="unstarted")
    assert [s["recoveries"] for s in journal.entries("start", held)] == [0]  # ran once, after
    kept = history.read(r, engine.keys, held, "default")
    assert kept is not None
    assert [e.event for e in kept.entries][:3] == ["enqueued", "claimed", "released"]


def test_a_worker_killed_by_a_fatal_signal_leaves_its_python_stacks_on_stderr(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal
) -> None:
    # workerd enables faulthandler before it forks: a crash in a C extension shows where each
    # thread of the child was, and the supervisor replaces the child as after any death.
    workerd = start_workerd(WORKER_COUNT="1")
    job_id = engine.enqueue("journal", {"file": journal.file, "sleep": 1.0})
    [started] = journal.wait_for("start", job_id)
    os.kill(started["pid"], signal.SIGSEGV)
    wait_until(
        lambda: "Fatal Python error: Segmentation fault" in workerd.err_path.read_text("utf-8"),
        10.0,
        "faulthandler's report of the crashed worker",
    )
    workerd.wait_for("child_exited", child_pid=started["pid"])
    assert engine.wait_for(job_id, JobState.COMPLETED, 20).recoveries == 1
