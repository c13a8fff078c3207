"""SIGHUP reloads handler code in place: real supervisor, real module file edited on disk.

The handler module lives in the test's temporary directory (on PYTHONPATH), as a user's own
module would; each test rewrites it and sends SIGHUP, then checks what ran: which version of
the code answered each job, how often each job started, and that no job failed, retried or
was lost, with the supervisor's pid unchanged.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from shared.model.jobs import Job, JobState
from tests.support.workerd import Workerd
from tests.workerd.conftest import HANDLERS, Engine, Journal

MODULE = "reloadable_handlers"
# Version 1 sleeps payload["sleep"] seconds; later versions do not (a "fixed" slow handler).
SOURCE = '''\
"""Written by tests/workerd/test_reload.py: the result says which version of this file ran."""

import os
import time

from tests.workerd.handlers_for_tests import _append, _entry
from workerd import handler

VERSION = {version}{padding}


@handler("versioned")
def versioned(payload, job):
    started = time.time()
    _append(payload["file"], _entry(job, "start", started))
    if VERSION == 1:
        time.sleep(float(payload.get("sleep", 0)))
    _append(payload["file"], _entry(job, "end", started))
    return {{"version": VERSION, "pid": os.getpid()}}
'''
TROUBLE = ("job_released", "job_retry_scheduled", "job_dead", "job_recovered", "job_timed_out")


def _write(directory: Path, version: int, *, broken: bool = False) -> None:
    # Each version differs in size too: Python trusts a cached .pyc whose source has the
    # same mtime (whole seconds) and size, and an edit within the second would go unseen.
    text = SOURCE.format(version=version, padding="  #" + "-" * version)
    if broken:
        text += "\ndef unfinished(:\n"
    (directory / f"{MODULE}.py").write_text(text)


@pytest.fixture
def module_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "mods"
    directory.mkdir()
    _write(directory, 1)
    return directory


def _start(start_workerd: Callable[..., Workerd], module_dir: Path, **env: str) -> Workerd:
    return start_workerd(
        TASKFORGE_HANDLERS=f"{HANDLERS},{MODULE}", PYTHONPATH=str(module_dir), **env
    )


def _version(job: Job) -> int:
    assert job.result_json is not None, job
    return json.loads(job.result_json)["version"]


@pytest.mark.slow
@pytest.mark.parametrize("whole_group", [False, True], ids=["supervisor", "process_group"])
def test_sighup_loads_the_edited_module_and_every_job_completes_exactly_once(
    start_workerd: Callable[..., Workerd],
    engine: Engine,
    journal: Journal,
    module_dir: Path,
    whole_group: bool,
) -> None:
    workerd = _start(
        start_workerd,
        module_dir,
        WORKER_COUNT="2",
        WORKER_DRAIN_GRACE="20s",
        new_session=whole_group,
    )
    old_workers = set(workerd.children("worker"))
    before = [engine.enqueue("versioned", {"file": journal.file, "sleep": 1.0}) for _ in range(5)]
    running = journal.wait_for("start", count=2)  # both workers busy, three jobs waiting

    _write(module_dir, 2)
    if whole_group:  # as `kill -HUP -- -<pgid>` would: the children must shrug it off
        workerd.signal_group(signal.SIGHUP)
    else:
        workerd.signal(signal.SIGHUP)
    workerd.wait_for("supervisor_ready", reloaded=True, timeout=30)
    after = [engine.enqueue("versioned", {"file": journal.file}) for _ in range(4)]

    jobs = engine.wait_all(
        [*before, *after], [JobState.COMPLETED, JobState.DEAD, JobState.RETRYING], timeout=30
    )
    assert {job.status for job in jobs.values()} == {JobState.COMPLETED}
    assert {(job.attempts, job.recoveries) for job in jobs.values()} == {(1, 0)}
    starts = Counter(entry["id"] for entry in journal.entries("start"))
    assert starts == {job_id: 1 for job_id in jobs}, "a job ran twice or not at all"
    # The old workers ran the old code, to the end of the jobs they held when SIGHUP came;
    # every job after them ran the new code.
    on_old = {entry["id"] for entry in journal.entries("start") if entry["pid"] in old_workers}
    assert {entry["id"] for entry in running} <= on_old
    assert not on_old & set(after)
    assert {job_id: _version(job) for job_id, job in jobs.items()} == {
        job_id: 1 if job_id in on_old else 2 for job_id in jobs
    }
    for event in TROUBLE:
        assert workerd.events(event) == [], event
    # Reloaded in place: the same process, a new set of workers, the port answering again.
    assert workerd.proc.poll() is None
    started = workerd.events("supervisor_started")
    assert [(rec["pid"], rec["reloaded"]) for rec in started] == [
        (workerd.pid, False),
        (workerd.pid, True),
    ]
    assert not old_workers & set(workerd.children("worker"))
    workerd.wait_ready()
    assert workerd.stop() == 0


@pytest.mark.slow
def test_sighup_with_a_module_that_no_longer_imports_keeps_the_old_code_running(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal, module_dir: Path
) -> None:
    workerd = _start(start_workerd, module_dir, WORKER_COUNT="1")
    children = sorted(workerd.children())

    _write(module_dir, 2, broken=True)
    workerd.signal(signal.SIGHUP)
    [failed] = workerd.wait_for("reload_failed", timeout=30)
    assert MODULE in failed["reason"] and "SyntaxError" in failed["reason"], failed
    assert workerd.events("supervisor_reloading") == []
    assert sorted(workerd.children()) == children  # nothing was stopped
    job_id = engine.enqueue("versioned", {"file": journal.file})
    assert _version(engine.wait_for(job_id, JobState.COMPLETED)) == 1

    _write(module_dir, 3)  # fixed: the next SIGHUP goes through
    workerd.signal(signal.SIGHUP)
    workerd.wait_for("supervisor_ready", reloaded=True, timeout=30)
    job_id = engine.enqueue("versioned", {"file": journal.file})
    assert _version(engine.wait_for(job_id, JobState.COMPLETED)) == 3


@pytest.mark.slow
def test_a_job_still_running_when_the_reload_grace_ends_is_released_uncounted_and_rerun(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal, module_dir: Path
) -> None:
    workerd = _start(start_workerd, module_dir, WORKER_COUNT="1", WORKER_DRAIN_GRACE="1s")
    job_id = engine.enqueue("versioned", {"file": journal.file, "sleep": 60})
    journal.wait_for("start", job_id)

    _write(module_dir, 2)  # version 2 does not sleep
    workerd.signal(signal.SIGHUP)

    job = engine.wait_for(job_id, [JobState.COMPLETED, JobState.DEAD], timeout=30)
    assert job.status is JobState.COMPLETED and _version(job) == 2
    assert (job.attempts, job.recoveries) == (1, 0)  # the drain's release counts neither
    assert len(journal.entries("start", job_id)) == 2
    assert len(journal.entries("end", job_id)) == 1
    workerd.wait_for("job_released", job_id=job_id)
    assert workerd.events("job_recovered") == []


@pytest.mark.slow
def test_sigterm_during_a_reload_stops_instead_and_lets_the_running_job_finish(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal, module_dir: Path
) -> None:
    workerd = _start(start_workerd, module_dir, WORKER_COUNT="1", WORKER_DRAIN_GRACE="20s")
    job_id = engine.enqueue("versioned", {"file": journal.file, "sleep": 2.0})
    journal.wait_for("start", job_id)

    workerd.signal(signal.SIGHUP)
    workerd.wait_for("supervisor_reloading", timeout=30)
    workerd.signal(signal.SIGTERM)

    assert workerd.wait_exit(timeout=20) == 0
    job = engine.job(job_id)
    assert (job.status, job.attempts, _version(job)) == (JobState.COMPLETED, 1, 1)
    workerd.wait_for("supervisor_stopping")
    workerd.wait_for("supervisor_stopped")
    assert len(workerd.events("supervisor_started")) == 1  # no re-exec
    workerd.wait_no_processes()
