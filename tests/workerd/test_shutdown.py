"""Graceful shutdown: SIGTERM to the supervisor or to its whole process group, and systemd's
notify protocol."""

from __future__ import annotations

import signal
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from shared.model.jobs import JobState
from tests.support.workerd import Workerd
from tests.workerd.conftest import Engine, Journal

DRAIN_GRACE = 2.0  # WORKER_DRAIN_GRACE of the fixture


def _terminate(workerd: Workerd, whole_group: bool) -> None:
    if whole_group:
        workerd.signal_group(signal.SIGTERM)
    else:
        workerd.signal(signal.SIGTERM)


@pytest.mark.parametrize("whole_group", [False, True], ids=["supervisor", "process_group"])
def test_sigterm_lets_the_running_job_finish_then_exits_0(
    start_workerd: Callable[..., Workerd],
    engine: Engine,
    journal: Journal,
    whole_group: bool,
) -> None:
    workerd = start_workerd(new_session=whole_group)
    job_id = engine.enqueue("journal", {"file": journal.file, "sleep": 1.0})
    journal.wait_for("start", job_id)

    _terminate(workerd, whole_group)

    assert workerd.wait_exit(timeout=15) == 0
    job = engine.job(job_id)
    assert job.status is JobState.COMPLETED
    assert (job.attempts, job.recoveries) == (1, 0)
    assert len(journal.entries("end", job_id)) == 1
    workerd.wait_for("supervisor_stopped")
    assert workerd.events("job_released") == []
    workerd.wait_no_processes()


@pytest.mark.parametrize("whole_group", [False, True], ids=["supervisor", "process_group"])
def test_sigterm_releases_a_job_longer_than_the_grace_without_counting_it(
    start_workerd: Callable[..., Workerd],
    engine: Engine,
    journal: Journal,
    whole_group: bool,
) -> None:
    workerd = start_workerd(new_session=whole_group)
    job_id = engine.enqueue("journal", {"file": journal.file, "sleep": 30})
    journal.wait_for("start", job_id)

    signalled = time.monotonic()
    _terminate(workerd, whole_group)

    assert workerd.wait_exit(timeout=15) == 0
    took = time.monotonic() - signalled
    assert DRAIN_GRACE <= took < DRAIN_GRACE + 5, f"exited {took:.2f}s after SIGTERM"
    job = engine.job(job_id)
    assert job.status is JobState.PENDING
    assert (job.attempts, job.recoveries) == (0, 0)  # a drain is neither an attempt nor a loss
    assert journal.entries("end", job_id) == []
    workerd.wait_for("job_released", job_id=job_id)
    assert workerd.events("job_recovered") == []
    workerd.wait_no_processes()


def test_second_sigterm_hurries_the_drain_and_still_releases_the_job(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal
) -> None:
    workerd = start_workerd(WORKER_COUNT="1", WORKER_DRAIN_GRACE="20s")
    job_id = engine.enqueue("journal", {"file": journal.file, "sleep": 30})
    journal.wait_for("start", job_id)

    signalled = time.monotonic()
    workerd.signal(signal.SIGTERM)
    workerd.wait_for("supervisor_stopping")
    workerd.signal(signal.SIGTERM)

    assert workerd.wait_exit(timeout=15) == 0
    took = time.monotonic() - signalled
    assert took < 5, f"exited {took:.2f}s after two SIGTERMs (grace 20 s)"
    workerd.wait_for("supervisor_hurry")
    job = engine.job(job_id)
    assert job.status is JobState.PENDING
    assert (job.attempts, job.recoveries) == (0, 0)
    workerd.wait_no_processes()


def test_notify_socket_gets_ready_after_children_are_up_and_stopping_on_sigterm(
    start_workerd: Callable[..., Workerd],
) -> None:
    # A short directory: AF_UNIX paths are limited to 108 bytes.
    with tempfile.TemporaryDirectory(prefix="tf-notify-") as directory:
        path = str(Path(directory) / "notify.sock")
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(path)
            sock.settimeout(15)
            workerd = start_workerd(wait_ready=False, WORKER_COUNT="2", NOTIFY_SOCKET=path)

            ready = sock.recv(4096).decode()
            assert "READY=1" in ready.splitlines(), ready
            assert "STATUS=2 workers running" in ready.splitlines(), ready
            # Sent once every worker is up (it beat once), so each logged its start first.
            assert len(workerd.events("worker_started")) == 2
            assert len(workerd.events("scheduler_started")) == 1
            workerd.wait_ready()

            workerd.signal(signal.SIGTERM)
            stopping = sock.recv(4096).decode()
            assert stopping.splitlines()[0] == "STOPPING=1", stopping
            assert workerd.wait_exit(timeout=15) == 0
