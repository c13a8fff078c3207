"""Cancelling a running job, end to end: a real workerd, a real Redis, real signals.

The request (cancel.lua) reaches the supervisor in its next lease renewal (TASK_VISIBILITY_TIMEOUT
1s: a renewal every 0.25 s), which writes it in the worker's slot and sends SIGTERM; SIGKILL
follows after WORKER_CANCEL_GRACE. Each test prints the time from the request to `canceled`
(bench/MEASUREMENTS.md quotes them).
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
from shared.model.jobs import JobState
from tests.faults import checker
from tests.support.tools import wait_until
from tests.support.workerd import Workerd
from tests.workerd.conftest import HANDLERS, Engine

CANCEL_HANDLERS = HANDLERS + ",tests.workerd.handlers_cancel"
GRACE = 1.0


def notes(path: Path, event: str | None = None) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    lines = [json.loads(line) for line in path.read_text().split("\n")[:-1] if line.strip()]
    return [n for n in lines if event is None or n["event"] == event]


def wait_note(path: Path, event: str, job_id: str, timeout: float = 10.0) -> dict[str, Any]:
    def seen() -> dict[str, Any] | None:
        found = [n for n in notes(path, event) if n["id"] == job_id]
        return found[0] if found else None

    return wait_until(seen, timeout, f"note {event} of {job_id}")


@pytest.fixture
def workerd(start_workerd: Callable[..., Workerd]) -> Workerd:
    return start_workerd(
        TASKFORGE_HANDLERS=CANCEL_HANDLERS, WORKER_CANCEL_GRACE=f"{GRACE:g}s", WORKER_COUNT="1"
    )


def cancel_and_time(engine: Engine, job_id: str, timeout: float = 10.0) -> float:
    """Ask for the cancel; return the seconds until the job is canceled."""
    asked = time.monotonic()
    result = engine.scripts.cancel(job_id, by="test")
    assert result.changed and result.job.status is JobState.PROCESSING
    engine.wait_for(job_id, JobState.CANCELED, timeout=timeout)
    return time.monotonic() - asked


def ended_canceled(r: redis.Redis, engine: Engine, job_id: str, stopped: str) -> history.Entry:
    """Assert the job's history: claimed once, asked by 'test', stopped as said, nothing after."""
    kept = history.read(r, engine.keys, job_id, "default")
    assert kept is not None
    events = [e.event for e in kept.entries]
    assert events == ["enqueued", "claimed", "cancel_requested", "canceled"], events
    asked, ended = kept.entries[2], kept.entries[3]
    assert (asked.actor, asked.by) == ("api", "test")
    assert ended.stopped == stopped and ended.attempt == 1 and ended.worker
    job = engine.job(job_id)
    assert job.attempts == 1 and job.recoveries == 0
    assert r.zscore(engine.keys.canceled, job_id) is not None
    return ended


def test_sigterm_stops_a_handler_in_a_python_sleep_loop(
    workerd: Workerd, engine: Engine, r: redis.Redis, tmp_path: Path
) -> None:
    file = tmp_path / "notes"
    job_id = engine.enqueue("cancel_sleeper", {"file": str(file)})
    start = wait_note(file, "start", job_id)

    took = cancel_and_time(engine, job_id)

    ended = ended_canceled(r, engine, job_id, "sigterm")
    assert ended.actor == "worker"
    assert wait_note(file, "unwound", job_id)  # its finally ran: the stack unwound
    assert not notes(file, "end")
    workerd.wait_for("cancel_signaled", job_id=job_id)
    workerd.wait_for("job_canceled", job_id=job_id, stopped="sigterm")
    # The worker lives on: the SIGTERM of a cancel is not the SIGTERM of a drain.
    follow = engine.enqueue("cancel_quick", {"file": str(file), "seconds": 0})
    engine.wait_for(follow, JobState.COMPLETED)
    assert wait_note(file, "start", follow)["pid"] == start["pid"]
    print(f"\ncancel → canceled, SIGTERM-stopped handler: {took * 1000:.0f} ms")


def test_a_handler_that_asks_stops_by_itself(
    workerd: Workerd, engine: Engine, r: redis.Redis, tmp_path: Path
) -> None:
    file = tmp_path / "notes"
    job_id = engine.enqueue("cancel_polite", {"file": str(file)})
    wait_note(file, "start", job_id)

    took = cancel_and_time(engine, job_id)

    ended_canceled(r, engine, job_id, "handler")
    assert wait_note(file, "saw_cancel", job_id)
    assert engine.job(job_id).result_json is None  # its return value is not a result
    print(f"\ncancel → canceled, cooperative handler: {took * 1000:.0f} ms")


@pytest.mark.parametrize("in_c", [False, True], ids=["swallows", "in-c"])
def test_a_handler_that_will_not_stop_is_killed_after_the_grace(
    workerd: Workerd, engine: Engine, r: redis.Redis, tmp_path: Path, in_c: bool
) -> None:
    file = tmp_path / "notes"
    job_id = engine.enqueue("cancel_stubborn", {"file": str(file), "c": in_c})
    wait_note(file, "start", job_id)

    took = cancel_and_time(engine, job_id)

    ended = ended_canceled(r, engine, job_id, "sigkill")
    assert ended.actor == "supervisor"
    assert took >= GRACE
    killed = workerd.wait_for("child_killed", reason="cancel grace over", job_id=job_id)
    assert killed
    workerd.wait_for("job_canceled", job_id=job_id, stopped="sigkill")
    if not in_c:
        assert notes(file, "swallowed")[0]["kind"] == "JobCanceled"
    print(
        f"\ncancel → canceled, SIGKILLed handler ({'C' if in_c else 'Python'}): "
        f"{took * 1000:.0f} ms (grace {GRACE:g} s)"
    )


def test_a_job_asked_to_stop_on_a_dead_host_is_canceled_by_recovery(
    start_workerd: Callable[..., Workerd], engine: Engine, r: redis.Redis, tmp_path: Path
) -> None:
    file = tmp_path / "notes"
    host = start_workerd(TASKFORGE_HANDLERS=CANCEL_HANDLERS, WORKER_COUNT="1", new_session=True)
    job_id = engine.enqueue("cancel_sleeper", {"file": str(file)})
    wait_note(file, "start", job_id)
    host.signal_group(signal.SIGSTOP)  # the host freezes: no renewal, no stop, no release
    engine.scripts.cancel(job_id, by="test")
    host.signal_group(signal.SIGKILL)  # and dies
    host.wait_exit(timeout=10)

    start_workerd(TASKFORGE_HANDLERS=CANCEL_HANDLERS, WORKER_COUNT="1")  # its scheduler recovers

    engine.wait_for(job_id, JobState.CANCELED, timeout=15)
    ended = ended_canceled(r, engine, job_id, "lost")
    assert ended.actor == "scheduler"


@pytest.mark.slow
def test_a_cancel_at_the_moment_the_handler_finishes_ends_one_way(
    start_workerd: Callable[..., Workerd], engine: Engine, r: redis.Redis, tmp_path: Path
) -> None:
    """12 jobs that return after 0.3-0.5 s, each cancelled as its end nears (after the worker
    logged its start, plus a spread): each ends completed or canceled, never both, never
    retried nor requeued; events and history agree (the fault checker)."""
    file = tmp_path / "notes"
    start_workerd(TASKFORGE_HANDLERS=CANCEL_HANDLERS, WORKER_COUNT="2", WORKER_CANCEL_GRACE="1s")
    ends: dict[str, int] = {"completed": 0, "canceled": 0}
    ids = []
    for n in range(12):
        seconds = 0.3 + (n % 5) * 0.05
        job_id = engine.enqueue("cancel_quick", {"file": str(file), "seconds": seconds})
        ids.append(job_id)
        start = wait_note(file, "start", job_id)
        # The supervisor hears of a request at its next renewal (every 0.25 s here): ask from
        # 0.35 s before the handler's end to 0.05 s after, so its signal lands around the end.
        delay = start["at"] + seconds - time.time() + (n % 9 - 7) * 0.05
        if delay > 0:
            time.sleep(delay)
        try:
            engine.scripts.cancel(job_id, by="race")
        except Exception as exc:  # completed already: the API's 409
            assert getattr(exc, "status", None) == "completed", exc
    jobs = engine.wait_all(ids, {JobState.COMPLETED, JobState.CANCELED}, timeout=30)
    for job_id, job in jobs.items():
        kept = history.read(r, engine.keys, job_id, "default")
        assert kept is not None
        events = [e.event for e in kept.entries]
        assert events.count("claimed") == 1, events
        assert events[-1] == str(job.status), events
        assert not {"retrying", "recovered", "released", "dead"} & set(events), events
        ends[str(job.status)] += 1
    found = checker.event_mismatches(r, engine.keys, ids)
    assert found.mismatches == []
    assert checker.invariant_violations(r, engine.keys) == []
    print(f"\ncancel at the handler's end, 12 jobs: {ends}")
