"""Redis goes away (stopped, or frozen with SIGSTOP) under a running workerd, then returns.

The session's redis-server is shared by every test: each test here restores it in a finally.
"""

from __future__ import annotations

import os
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from shared.model.jobs import JobState
from tests.faults.harness import log_time
from tests.support.redis_server import RedisServer
from tests.support.tools import alive, free_port, wait_until
from tests.support.workerd import Workerd
from tests.workerd.conftest import Engine, Journal

PASSWORD = "hunter2-not-for-logs"
# How long READY=1 must stay away while Redis is down (an absence is checked over a window).
NOT_READY_WINDOW = 1.0


def _outage(seconds: float) -> None:
    """Keep the injected fault in place for `seconds` (a fault's length, not a wait for state)."""
    time.sleep(seconds)


@pytest.mark.slow
def test_redis_stopped_and_restarted_every_process_keeps_running_and_work_resumes(
    start_workerd: Callable[..., Workerd],
    engine: Engine,
    journal: Journal,
    redis_server: RedisServer,
) -> None:
    workerd = start_workerd(WORKER_COUNT="2")
    before = engine.enqueue("journal", {"file": journal.file})
    engine.wait_for(before, JobState.COMPLETED)
    children = sorted(workerd.children())

    redis_server.stop()
    try:
        for component in ("worker", "scheduler"):
            workerd.wait_for("redis_unavailable", component=component, timeout=10)
        status, _, _ = workerd.http("/health")
        assert status == 503
        _outage(3.0)
        assert workerd.proc.poll() is None
        assert all(alive(pid) for pid in children)
    finally:
        redis_server.start()  # empty: the server keeps nothing on disk

    restarted = time.monotonic()
    job_id = engine.enqueue("journal", {"file": journal.file})
    engine.wait_for(job_id, JobState.COMPLETED, timeout=10)
    took = time.monotonic() - restarted
    print(f"\nRedis restarted → new job completed in {took:.2f} s")
    assert took < 5, f"work resumed only {took:.2f}s after Redis came back"
    workerd.wait_for("redis_available", component="scheduler", timeout=10)
    wait_until(lambda: workerd.http("/health")[0] == 200, 5, "/health back to 200")
    workerd.wait_ready(timeout=5)
    assert sorted(workerd.children()) == children  # nobody crashed or was replaced
    assert workerd.events("child_exited") == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "freeze",
    [3.0, 7.0],
    # 3 leases; then past REDIS_SOCKET_TIMEOUT (5 s), so every client times out and reconnects.
    ids=["3_leases", "past_socket_timeout"],
)
def test_redis_frozen_longer_than_the_lease_does_not_recover_a_running_job(
    start_workerd: Callable[..., Workerd],
    engine: Engine,
    journal: Journal,
    redis_server: RedisServer,
    freeze: float,
) -> None:
    workerd = start_workerd(WORKER_COUNT="1", TASK_VISIBILITY_TIMEOUT="1s")
    job_id = engine.enqueue("journal", {"file": journal.file, "sleep": freeze + 1.0})
    journal.wait_for("start", job_id)
    assert redis_server.process is not None
    redis_pid = redis_server.process.pid

    os.kill(redis_pid, signal.SIGSTOP)
    try:
        _outage(freeze)
    finally:
        os.kill(redis_pid, signal.SIGCONT)

    job = engine.wait_for(job_id, [JobState.COMPLETED, JobState.DEAD], timeout=15)
    assert workerd.events("job_recovered") == []
    assert workerd.events("lease_lost") == []
    assert job.status is JobState.COMPLETED
    assert (job.attempts, job.recoveries) == (1, 0)
    assert len(journal.entries("start", job_id)) == 1
    assert len(journal.entries("end", job_id)) == 1


# The job's own timeout, and its run: it ends well within the timeout, just after Redis freezes.
SHORT_TIMEOUT_S, SHORT_RUN_S, OUTAGE_S = 2, 0.5, 7.0


def _freeze_past_the_timeout(
    redis_server: RedisServer, workerd: Workerd, journal: Journal, release: Path, ended: str
) -> float:
    """Freeze Redis, release the gated handler, and once job `ended` has ended keep Redis
    frozen for OUTAGE_S, no worker killed meanwhile; thaw and return when (time.time())."""
    redis_server.freeze()
    try:
        release.touch()
        journal.wait_for("end", ended)
        _outage(OUTAGE_S)  # the fault, past the job's timeout and the socket timeout
        assert workerd.events("child_killed") == []
    finally:
        redis_server.thaw()
    return time.time()


@pytest.mark.slow
@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_job_whose_completion_waits_out_an_outage_past_its_timeout_is_not_timed_out(
    start_workerd: Callable[..., Workerd],
    engine: Engine,
    journal: Journal,
    redis_server: RedisServer,
    threads: str,
    tmp_path: Path,
) -> None:
    # The handler returns 0.5 s into a 2 s timeout, once Redis is frozen (it waits for the
    # release file until then): its completion waits for Redis past the timeout. The timeout
    # bounds the handler, not that wait: the job must not be killed and failed as timed out,
    # which would run it again (its lease is long here, so only the watchdog could end it).
    release = tmp_path / "release"
    workerd = start_workerd(WORKER_COUNT="1", WORKER_THREADS=threads, TASK_VISIBILITY_TIMEOUT="30s")
    job_id = engine.enqueue(
        "journal",
        {"file": journal.file, "sleep": SHORT_RUN_S, "release": str(release)},
        timeout=SHORT_TIMEOUT_S,
    )
    journal.wait_for("start", job_id)
    thawed = _freeze_past_the_timeout(redis_server, workerd, journal, release, job_id)

    job = engine.wait_for(job_id, [JobState.COMPLETED, JobState.DEAD], timeout=15)
    assert workerd.events("child_killed") == []
    assert job.status is JobState.COMPLETED
    assert job.attempts == 1
    assert len(journal.entries("start", job_id)) == 1
    # Its completion was written only once Redis returned: the wait the fix is about happened.
    [completed] = workerd.wait_for("job_completed", job_id=job_id)
    assert log_time(completed) >= thawed - 0.5


@pytest.mark.slow
@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_held_jobs_late_read_waits_out_an_outage_and_nothing_runs_twice(
    start_workerd: Callable[..., Workerd],
    engine: Engine,
    journal: Journal,
    redis_server: RedisServer,
    tmp_path: Path,
    threads: str,
) -> None:
    # A backlog of one type, short once seen: the worker holds each next job and reads the
    # completion it sent while that job runs (workerd.prefetch). The gate job waits until Redis
    # is frozen, so its completion (claiming the job after the held one) is sent into the
    # freeze; the held job then runs 0.5 s into its 2 s timeout, and the flusher's late read
    # waits out the 7 s outage while it runs and after it ends. When Redis returns, every job
    # is completed once, each counted and logged once, none killed, none run again.
    # With two job threads the process's main thread makes the late reads for both, and
    # which thread holds which job is the race's: the same outcome is asserted, and the held
    # job's timing only with one thread.
    release = tmp_path / "release"
    quick = [engine.enqueue("journal", {"file": journal.file}) for _ in range(4)]
    gate = engine.enqueue("journal", {"file": journal.file, "release": str(release)})
    held = engine.enqueue(
        "journal", {"file": journal.file, "sleep": SHORT_RUN_S}, timeout=SHORT_TIMEOUT_S
    )
    after = engine.enqueue("journal", {"file": journal.file})
    jobs = [*quick, gate, held, after]
    workerd = start_workerd(WORKER_COUNT="1", WORKER_THREADS=threads, TASK_VISIBILITY_TIMEOUT="30s")
    journal.wait_for("start", gate)
    # The held job ends while the gate's completion waits unacknowledged in the freeze.
    ended = held if threads == "1" else gate
    thawed = _freeze_past_the_timeout(redis_server, workerd, journal, release, ended)

    done = engine.wait_all(jobs, (JobState.COMPLETED, JobState.DEAD), timeout=30)
    assert {job_id: job.status for job_id, job in done.items()} == dict.fromkeys(
        jobs, JobState.COMPLETED
    )
    assert all(job.attempts == 1 and job.recoveries == 0 for job in done.values())
    assert [len(journal.entries("start", job_id)) for job_id in jobs] == [1] * len(jobs)
    assert workerd.events("child_killed") == [] and workerd.events("job_recovered") == []
    # Each completion logged once; the gate's only after Redis returned, though the job held
    # behind it had ended during the outage: read late, by the flusher.
    wait_until(
        lambda: len(workerd.events("job_completed")) == len(jobs), 10.0, "every completion logged"
    )
    assert sorted(rec["job_id"] for rec in workerd.events("job_completed")) == sorted(jobs)
    [gate_done] = workerd.events("job_completed", job_id=gate)
    assert log_time(gate_done) >= thawed - 0.5
    if threads == "1":
        [held_end] = journal.entries("end", held)
        assert held_end["end"] < thawed


@pytest.mark.slow
def test_ready_waits_for_redis_and_every_redis_error_names_the_server_not_the_password(
    start_workerd: Callable[..., Workerd], redis_server: RedisServer, tmp_path: Path
) -> None:
    port = free_port()  # nothing listens there yet
    shown = f"redis://:***@127.0.0.1:{port}/0"
    late = RedisServer(redis_server.binary, tmp_path / "late", port=port)
    late.dir.mkdir()
    # A short directory: AF_UNIX paths are limited to 108 bytes.
    with (
        tempfile.TemporaryDirectory(prefix="tf-notify-") as directory,
        socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock,
    ):
        sock.bind(str(Path(directory) / "notify.sock"))
        workerd = start_workerd(
            wait_ready=False,
            WORKER_COUNT="2",
            REDIS_URL=f"redis://:{PASSWORD}@127.0.0.1:{port}/0",
            NOTIFY_SOCKET=sock.getsockname(),
        )
        try:
            [started] = workerd.wait_for("supervisor_started")
            assert started["redis"] == shown
            for component, count in (("supervisor", 1), ("scheduler", 1), ("worker", 2)):
                for down in workerd.wait_for("redis_unavailable", component=component, count=count):
                    assert down["redis"] == shown
                    assert down["error"].startswith("ConnectionError: ")
            # Every child is up and has beaten (each logged the outage after its first beat),
            # so without Redis in the condition READY=1 would come at the next tick.
            sock.settimeout(NOT_READY_WINDOW)
            with pytest.raises(TimeoutError):
                sock.recv(4096)
            assert workerd.events("supervisor_ready") == []

            late.start()
            redis.Redis(port=port).config_set("requirepass", PASSWORD)
            sock.settimeout(15)
            assert "READY=1" in sock.recv(4096).decode().splitlines()
            workerd.wait_for("supervisor_ready")
            workerd.wait_ready()
            assert workerd.stop() == 0
        finally:
            workerd.stop()
            late.stop()
    output = workerd.log_path.read_text() + workerd.stderr()
    assert PASSWORD not in output


@pytest.mark.slow
@pytest.mark.parametrize("busy", [False, True], ids=["idle_workers", "a_worker_holds_a_job"])
def test_stopped_while_redis_is_down_only_a_held_job_is_named_as_abandoned(
    start_workerd: Callable[..., Workerd],
    engine: Engine,
    journal: Journal,
    redis_server: RedisServer,
    busy: bool,
) -> None:
    workerd = start_workerd(WORKER_COUNT="2")
    job_id = None
    if busy:  # runs past the drain grace: its worker is killed holding it
        job_id = engine.enqueue("journal", {"file": journal.file, "sleep": 30})
        journal.wait_for("start", job_id)

    redis_server.stop()
    try:
        workerd.wait_for("redis_unavailable", component="worker", timeout=10)
        workerd.signal(signal.SIGTERM)
        assert workerd.wait_exit(timeout=30) == 0
    finally:
        redis_server.start()  # empty: the server keeps nothing on disk

    abandoned = [line.get("job_id") for line in workerd.events("requeue_abandoned")]
    assert abandoned == ([job_id] if busy else []), workerd.tail()
