"""Fast tests of workerd's parts: shared-memory slots, backoff, the handler boundary, systemd
notify, and exit-status decoding. Real fork, real sockets; no Redis, no supervisor (the
supervisor's rules are stepped through its public step(now) in test_steps.py)."""

from __future__ import annotations

import faulthandler
import logging
import math
import os
import signal
import socket
import struct
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from shared.model.jobs import Job, JobState
from workerd import JobContext, PermanentError, handler
from workerd.acks import Acknowledger
from workerd.backoff import Backoff
from workerd.children import describe_exit, process_stopped
from workerd.execution import run_handler
from workerd.sd_notify import notify
from workerd.slots import SlotTable

# --- slots -------------------------------------------------------------------------------------


def test_slot_reads_booting_until_the_child_beats_once() -> None:
    slot = SlotTable(2).slot(1)

    slot.reset(booting=True)
    booting = slot.read()
    assert booting is not None and booting.booting and booting.token == -1
    assert booting.job_id is None

    slot.beat()
    beaten = slot.read()
    assert beaten is not None and not beaten.booting
    assert (beaten.job_id, beaten.token) == (None, 0)
    assert beaten.heartbeat >= booting.heartbeat

    slot.reset(booting=False)
    reset = slot.read()
    assert reset is not None and not reset.booting


def test_slot_records_the_running_job_and_clears_it_on_the_next_beat() -> None:
    slot = SlotTable(1).slot(0)
    job_id = str(uuid.uuid4())
    before = time.monotonic()

    slot.start_job(job_id, 42, 2.5)
    running = slot.read()
    assert running is not None
    assert (running.job_id, running.token, running.job_timeout) == (job_id, 42, 2.5)
    assert before <= running.job_started == running.heartbeat <= time.monotonic()

    # Its handler returned: still shown (its lease renewed, a death naming it), timed anew for
    # its outcome's write: the limit from now, on the job's own start (which names it).
    slot.handler_returned(600.0)
    writing = slot.read()
    assert writing is not None
    assert (writing.job_id, writing.token) == (job_id, 42)
    assert writing.job_started == running.job_started <= writing.heartbeat
    elapsed = writing.heartbeat - writing.job_started
    assert writing.job_timeout == pytest.approx(elapsed + 600.0)
    slot.handler_returned(0.0)  # an untimed job writes untimed
    untimed = slot.read()
    assert untimed is not None and (untimed.job_id, untimed.job_timeout) == (job_id, 0.0)
    assert (writing.queue, writing.job_type) == (running.queue, running.job_type)

    assert not running.writing_outcome and writing.writing_outcome

    slot.beat_if_idle()  # a write between jobs beats so; a job shown stays shown
    assert slot.read() == untimed

    slot.beat()
    idle = slot.read()
    assert idle is not None and (idle.job_id, idle.token, idle.job_timeout) == (None, 0, 0.0)
    assert not idle.writing_outcome
    slot.beat_if_idle()
    again = slot.read()
    assert again is not None and again.job_id is None and again.heartbeat > idle.heartbeat


def test_slots_are_independent_and_out_of_range_is_refused() -> None:
    table = SlotTable(2)
    table.slot(0).start_job("a" * 36, 1, 1.0)
    table.slot(1).start_job("b" * 36, 2, 2.0)
    first, second = table.slot(0).read(), table.slot(1).read()
    assert first is not None and first.job_id == "a" * 36
    assert second is not None and second.job_id == "b" * 36
    with pytest.raises(IndexError):
        table.slot(2)
    with pytest.raises(IndexError):
        table.slot(-1)


def test_supervisor_status_round_trips() -> None:
    table = SlotTable(3)
    assert table.status() is not None  # all zero before the first publish: nothing alive
    table.publish_status(2, True, False)
    status = table.status()
    assert status is not None
    assert (status.live_workers, status.scheduler_alive, status.scripts_loaded) == (2, True, False)


def test_slot_skips_a_half_written_record_and_recovers_once_the_slot_is_reset() -> None:
    table = SlotTable(1)
    slot = table.slot(0)
    slot.beat()
    # A child SIGKILLed between the first and last store of a write leaves the sequence odd.
    region = table._region
    (seq,) = struct.unpack_from("<Q", region, 0)
    struct.pack_into("<Q", region, 0, seq + 1)

    assert slot.read() is None  # half-written: never trusted

    slot.reset(booting=True)  # the supervisor, before forking the replacement
    replacement = slot.read()
    assert replacement is not None and replacement.booting
    slot.beat()  # the replacement's first beat
    beaten = slot.read()
    assert beaten is not None and not beaten.booting


def test_slot_reader_never_sees_a_torn_record_while_another_process_writes() -> None:
    table = SlotTable(1)
    slot = table.slot(0)
    slot.start_job(f"job-{1:032d}", 1, 1.0)
    pid = os.fork()
    if pid == 0:  # the writer, until killed: every record it writes is self-consistent
        try:
            n = 1
            while True:
                n += 1
                slot.start_job(f"job-{n:032d}", n, float(n))
        finally:
            os._exit(0)
    reads, torn = 0, []
    try:
        deadline = time.monotonic() + 3.0  # a torn read is rare: give it many chances
        while time.monotonic() < deadline and not torn:
            state = slot.read()
            if state is None:
                continue  # the writer kept writing: skipped, which is allowed
            reads += 1
            consistent = state.job_id == f"job-{state.token:032d}" and (
                state.token == 1 or state.job_timeout == float(state.token)
            )
            if not consistent:
                torn.append(state)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert torn == [], f"torn read after {reads} good ones"
    assert reads > 100


# --- backoff -----------------------------------------------------------------------------------


def test_backoff_doubles_from_first_to_the_cap_with_jitter_in_the_upper_half() -> None:
    backoff = Backoff("test", first=0.1, cap=1.0)
    error = ConnectionError("down")
    ceilings = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]
    for ceiling in ceilings:
        backoff.failed(error)
        delays = [backoff.delay() for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays), (ceiling, min(delays), max(delays))
        assert max(delays) - min(delays) > 0  # jittered, not a fixed step
    assert backoff.failures == len(ceilings)


def test_backoff_logs_once_per_outage_and_resets_on_success(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backoff = Backoff("worker", first=0.1, cap=0.2)
    with caplog.at_level(logging.INFO, logger="workerd.backoff"):
        for _ in range(5):
            backoff.failed(ConnectionError("down"))
        backoff.succeeded()
        backoff.succeeded()
    events = [record.getMessage() for record in caplog.records]
    assert events == ["redis_unavailable", "redis_available"]
    assert backoff.failures == 0
    backoff.failed(ConnectionError("down"))
    assert 0.05 <= backoff.delay() <= 0.1  # back to the first step


def test_backoff_wait_sleeps_the_delay() -> None:
    slept: list[float] = []
    backoff = Backoff("test", first=0.02, cap=0.02, sleep=slept.append)
    backoff.wait(ConnectionError("down"))
    backoff.wait(ConnectionError("down"))
    assert len(slept) == 2 and all(0.01 <= s <= 0.02 for s in slept), slept


# --- the handler boundary ----------------------------------------------------------------------

seen: list[tuple[Any, JobContext]] = []


@handler("units.ok")
def _ok(payload: Any, job: JobContext) -> dict[str, Any]:
    seen.append((payload, job))
    return {"echo": payload, "n": 1}


@handler("units.raises")
def _raises(payload: Any, job: JobContext) -> None:
    raise ValueError(payload["message"])


@handler("units.permanent")
def _permanent(payload: Any, job: JobContext) -> None:
    raise PermanentError("card declined")


@handler("units.unserialisable")
def _unserialisable(payload: Any, job: JobContext) -> Any:
    return {"when": object()} if payload.get("kind") == "object" else {"x": math.nan}


@handler("units.big")
def _big(payload: Any, job: JobContext) -> str:
    return "x" * payload["size"]


def _job(job_type: str, payload: str = "{}", **fields: Any) -> Job:
    values: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "type": job_type,
        "status": JobState.PROCESSING,
        "priority": 0,
        "max_retries": 3,
        "attempts": 1,
        "recoveries": 0,
        "payload_json": payload,
        "created_at": 0,
        "updated_at": 0,
    }
    return Job(**{**values, **fields})


def test_success_stores_the_json_result_and_passes_the_job_context() -> None:
    job = _job("units.ok", '{"a": [1, 2]}', attempts=2, priority=7, recoveries=1, max_retries=4)

    outcome = run_handler(job, 65536)

    assert outcome.ok and not outcome.permanent and outcome.error == ""
    assert outcome.result_json == '{"echo":{"a":[1,2]},"n":1}'
    payload, context = seen[-1]
    assert payload == {"a": [1, 2]}
    assert context == JobContext(
        id=job.id, type="units.ok", attempt=2, max_retries=4, priority=7, recoveries=1
    )


def test_exception_is_a_failure_with_its_type_and_capped_message() -> None:
    outcome = run_handler(_job("units.raises", '{"message": "no such user"}'), 65536)
    assert not outcome.ok and not outcome.permanent
    assert (outcome.error, outcome.error_kind) == ("ValueError: no such user", "ValueError")

    long = run_handler(_job("units.raises", '{"message": "' + "m" * 10_000 + '"}'), 65536)
    assert len(long.error) == 500 and long.error.startswith("ValueError: mmm")


def test_permanent_error_is_a_permanent_failure() -> None:
    outcome = run_handler(_job("units.permanent"), 65536)
    assert not outcome.ok and outcome.permanent
    assert (outcome.error, outcome.error_kind) == (
        "PermanentError: card declined",
        "PermanentError",
    )


def test_a_type_without_handler_is_an_application_failure() -> None:
    outcome = run_handler(_job("units.nobody_handles_this"), 65536)
    assert not outcome.ok and not outcome.permanent
    assert outcome.error == "NoHandler: no handler for job type 'units.nobody_handles_this'"
    assert outcome.error_kind == "NoHandler"


@pytest.mark.parametrize("kind", ["object", "nan"])
def test_a_result_that_is_not_json_is_a_failure_that_says_so(kind: str) -> None:
    outcome = run_handler(_job("units.unserialisable", f'{{"kind": "{kind}"}}'), 65536)
    assert not outcome.ok and not outcome.permanent
    assert outcome.error.startswith("ResultNotSerialisable: result is not JSON-serialisable (")
    assert outcome.error_kind == "ResultNotSerialisable"


def test_a_result_over_the_size_cap_is_a_failure_that_says_so() -> None:
    fits = run_handler(_job("units.big", '{"size": 98}'), 100)  # 98 x's + 2 quotes = 100 bytes
    assert fits.ok
    outcome = run_handler(_job("units.big", '{"size": 99}'), 100)
    assert not outcome.ok and not outcome.permanent
    assert outcome.error == "ResultTooLarge: result is 101 bytes, over the 100 cap"
    assert outcome.error_kind == "ResultTooLarge"


# --- systemd notify ----------------------------------------------------------------------------


@pytest.fixture
def notify_socket(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """Return a bound AF_UNIX datagram socket that NOTIFY_SOCKET names."""
    with tempfile.TemporaryDirectory(prefix="tf-unit-") as directory:  # short: 108-byte limit
        path = str(Path(directory) / "notify")
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(path)
            sock.settimeout(2)
            monkeypatch.setenv("NOTIFY_SOCKET", path)
            yield sock


def test_notify_sends_one_datagram_to_the_socket(notify_socket: socket.socket) -> None:
    assert notify("READY=1\nSTATUS=2 workers running")
    assert notify_socket.recv(4096) == b"READY=1\nSTATUS=2 workers running"
    assert notify("STOPPING=1")
    assert notify_socket.recv(4096) == b"STOPPING=1"


def test_notify_speaks_to_an_abstract_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"taskforge-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(2)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert notify("READY=1")
        assert sock.recv(4096) == b"READY=1"


def test_notify_without_systemd_or_with_a_dead_socket_returns_false(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert notify("READY=1") is False
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens"))
    assert notify("READY=1") is False


# --- exit statuses and process states ----------------------------------------------------------


def _status_of_child(action: str) -> int:
    """Fork a child that exits or kills itself as `action` says; return its waitpid status."""
    pid = os.fork()
    if pid == 0:
        try:
            if action.startswith("exit"):
                os._exit(int(action.removeprefix("exit")))
            faulthandler.disable()  # pytest's handler would print a traceback for SIGSEGV
            sig = signal.Signals[action]
            if sig is not signal.SIGKILL:  # the one signal no handler can take
                # The default action, not a handler inherited from pytest (tests/conftest.py
                # turns SIGTERM into KeyboardInterrupt, which would exit 99 below).
                signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        finally:
            os._exit(99)  # a signal above did not kill us
    _, status = os.waitpid(pid, 0)
    return status


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("exit0", ("exited with code 0", 0, None)),
        ("exit3", ("exited with code 3", 3, None)),
        ("SIGKILL", ("killed by SIGKILL (out of memory?)", None, "SIGKILL")),
        ("SIGTERM", ("killed by SIGTERM", None, "SIGTERM")),
        ("SIGSEGV", ("killed by SIGSEGV", None, "SIGSEGV")),
    ],
)
def test_describe_exit_names_the_code_or_the_signal(
    action: str, expected: tuple[str, int | None, str | None]
) -> None:
    assert describe_exit(_status_of_child(action)) == expected


def test_a_sigkill_the_supervisor_sent_is_not_blamed_on_memory() -> None:
    status = _status_of_child("SIGKILL")
    assert describe_exit(status, "lease lost") == ("killed by SIGKILL", None, "SIGKILL")


def test_process_stopped_tells_a_sigstopped_process() -> None:
    pid = os.fork()
    if pid == 0:
        try:
            time.sleep(10)
        finally:
            os._exit(0)
    try:
        assert not process_stopped(pid)
        os.kill(pid, signal.SIGSTOP)
        _, status = os.waitpid(pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status)
        assert process_stopped(pid)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert not process_stopped(pid)  # gone


# --- a running job's cancel: the supervisor's words in the slot, the worker's SIGTERM -----------


def test_control_names_the_execution_to_cancel_and_forgets_on_reset() -> None:
    table = SlotTable(2)
    slot, other = table.slot(0), table.slot(1)
    control = slot.control
    assert control is not None and other.control is not None
    started = slot.start_job(str(uuid.uuid4()), 1, 5.0)
    assert not control.cancel_requested(started) and control.cancels_sent() == 0

    control.request_cancel(started)

    assert control.cancel_requested(started) and control.cancels_sent() == 1
    assert not control.cancel_requested(started + 1.0)  # the child's next job is not it
    assert not other.control.cancel_requested(started) and other.control.cancels_sent() == 0
    assert slot.read() is not None  # the child's record is untouched by the supervisor's words
    assert not control.drain_requested()
    control.request_drain()
    assert control.drain_requested()
    slot.reset(booting=True)
    assert control.cancels_sent() == 0 and not control.drain_requested()
    assert not control.cancel_requested(started)


def _sigterm_worker() -> tuple[Any, Any]:
    from shared.settings.config import Settings
    from tests.fakes import fake_scripts
    from workerd.execution import Execution
    from workerd.worker import WorkerProcess

    slot = SlotTable(1).slot(0)
    worker = WorkerProcess(Settings.from_env({}), fake_scripts(), slot, "w1", os.getppid())
    worker.execution = Execution(slot.start_job(str(uuid.uuid4()), 1, 5.0), slot.control)
    return worker, slot.control


def test_a_plain_sigterm_asks_the_worker_to_stop_after_its_job() -> None:
    worker, _ = _sigterm_worker()
    worker.execution.armed = True
    worker._on_sigterm(signal.SIGTERM, None)  # no exception: the handler runs on
    assert worker.stopping


def test_a_cancel_sigterm_interrupts_the_handler_once_and_the_worker_goes_on() -> None:
    from workerd.handler_registry import JobCanceled

    worker, control = _sigterm_worker()
    worker.execution.armed = True
    control.request_cancel(worker.execution.started)
    with pytest.raises(JobCanceled):
        worker._on_sigterm(signal.SIGTERM, None)
    assert not worker.stopping
    control.request_cancel(worker.execution.started)  # a second signal while it unwinds
    worker._on_sigterm(signal.SIGTERM, None)
    assert not worker.stopping


@pytest.mark.parametrize("case", ["not in the handler", "another job", "it asked"])
def test_a_cancel_sigterm_outside_its_handler_changes_nothing(case: str) -> None:
    worker, control = _sigterm_worker()
    worker.execution.armed = case != "not in the handler"
    worker.execution.asked = case == "it asked"
    control.request_cancel(worker.execution.started + (1.0 if case == "another job" else 0.0))
    worker._on_sigterm(signal.SIGTERM, None)
    assert not worker.stopping


def test_a_drain_merged_with_a_cancel_does_both() -> None:
    from workerd.handler_registry import JobCanceled

    worker, control = _sigterm_worker()
    worker.execution.armed = True
    control.request_cancel(worker.execution.started)
    control.request_drain()
    with pytest.raises(JobCanceled):
        worker._on_sigterm(signal.SIGTERM, None)
    assert worker.stopping


def test_run_handler_ends_a_job_canceled_by_how_it_stopped() -> None:
    from workerd.execution import Execution
    from workerd.handler_registry import JobCanceled

    table = SlotTable(1)
    slot = table.slot(0)

    @handler("t_cancel_raise")
    def raising(payload: Any, job: JobContext) -> None:
        raise ValueError("stopping")

    @handler("t_cancel_ask")
    def asking(payload: Any, job: JobContext) -> str:
        return "stopped" if job.cancel_requested() else "done"

    @handler("t_cancel_interrupted")
    def interrupted(payload: Any, job: JobContext) -> None:
        raise JobCanceled()

    def run(job_type: str, requested: bool) -> Any:
        execution = Execution(slot.start_job(str(uuid.uuid4()), 1, 5.0), slot.control)
        if requested:
            slot.control.request_cancel(execution.started)
        job = Job.from_hash(
            {b"id": b"x", b"type": job_type.encode(), b"status": b"processing", b"payload": b"{}"}
        )
        return run_handler(job, 1000, execution)

    assert run("t_cancel_raise", True).canceled == "handler"
    assert run("t_cancel_raise", False).canceled == ""  # a plain failure: retried
    assert run("t_cancel_ask", True).canceled == "handler"
    assert run("t_cancel_ask", False).ok
    assert run("t_cancel_interrupted", True).canceled == "sigterm"


def test_a_worker_whose_supervisor_is_gone_stops_and_asks_at_most_twice_a_second(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shared.settings.config import Settings
    from tests.fakes import fake_scripts
    from workerd import worker as worker_module
    from workerd.worker import WorkerProcess

    asked: list[int] = []
    parent = [os.getppid()]

    def getppid() -> int:
        asked.append(1)
        return parent[0]

    monkeypatch.setattr(worker_module.os, "getppid", getppid)
    now = [100.0]
    slot = SlotTable(1).slot(0)
    worker = WorkerProcess(Settings.from_env({}), fake_scripts(), slot, "w1", parent[0])
    worker.parent_clock = lambda: now[0]
    assert worker.keep_going() and len(asked) == 1  # the first step asks
    parent[0] = 1  # the supervisor died: init adopted the worker
    now[0] += worker_module.PARENT_CHECK_EVERY / 2
    assert worker.keep_going() and len(asked) == 1  # within the interval: not asked again
    now[0] += worker_module.PARENT_CHECK_EVERY / 2
    assert not worker.keep_going() and len(asked) == 2
    assert worker.exit_reason == "supervisor gone"


def test_a_write_waiting_out_an_outage_beats_between_tries() -> None:
    # A thread handing back a held job writes with its slot idle: each retry beats, or a
    # sibling's beats would make it look stuck to the supervisor (duties.watchdog).
    tries, beats, slept = [], [], []

    def attempt() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise redis.ConnectionError("down")
        return "written"

    acks = Acknowledger(
        None,  # type: ignore[arg-type]  # the attempt is the test's own
        None,  # type: ignore[arg-type]
        Backoff("worker", sleep=slept.append),
        parent_alive=lambda: True,
        beat_if_idle=lambda: beats.append(len(tries)),
    )
    assert acks._until_written(attempt) == "written"
    assert (len(tries), beats, len(slept)) == (3, [1, 2], 2)
