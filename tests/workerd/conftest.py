"""Fixtures for the workerd process tests: a real ``python -m workerd`` on the private Redis.

`start_workerd(**env)` starts a supervisor as a subprocess (same interpreter) with short
timeouts, its JSON-lines stdout captured to a file the tests read events from, and waits for
``/ready``. At teardown every supervisor started is stopped (SIGTERM, SIGKILL after a bound)
and no process it forked may be left: each run carries a unique marker in its environment,
which every child inherits, so a scan of ``/proc/*/environ`` finds them even once re-parented.

`engine` enqueues through shared.scripts.Scripts and waits for jobs to reach a state by
polling Redis against a deadline. `journal` reads the executions the test handlers record.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from shared.config import VARIABLES
from shared.jobs import Job, JobState, validate_enqueue
from shared.keys import Keys
from shared.queries import get_job
from shared.scripts import Scripts
from tests._tools import RedisServer, free_port, wait_until

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
# Every process of one workerd run inherits this variable: how leftovers are found.
MARKER_ENV = "TASKFORGE_TEST_RUN"
HANDLERS = "workerd.demo,tests.workerd.handlers_for_tests"
# Short timeouts so every rule is reached in a second or two.
BASE_ENV = {
    "WORKER_COUNT": "2",
    "TASK_VISIBILITY_TIMEOUT": "1s",
    "TASK_RETRY_BASE_DELAY": "100ms",
    "WORKER_DRAIN_GRACE": "2s",
    "LOG_LEVEL": "INFO",
    # Loopback: nothing here is for other machines (the default 0.0.0.0 has its own test).
    "TASKFORGE_BIND_HOST": "127.0.0.1",
}
READY_TIMEOUT = 15.0
# SIGTERM to exit: drain grace + the supervisor's helper stop and final-ack windows (5 s each).
STOP_TIMEOUT = 20.0
LEFTOVER_TIMEOUT = 5.0


def marked_processes(marker: str) -> list[int]:
    """Return the live processes whose environment holds this run's marker."""
    needle = f"{MARKER_ENV}={marker}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as environ:
                variables = environ.read().split(b"\0")
        except OSError:  # gone, or not ours; a zombie reads as empty
            continue
        if needle in variables:
            found.append(int(entry.name))
    return found


def cpu_seconds(pid: int) -> float:
    """Return the user + system CPU time `pid` has used so far (from /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    # After the command name: state is field 3, utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def alive(pid: int) -> bool:
    """Tell whether `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _scrubbed_environment() -> dict[str, str]:
    """Return os.environ without any setting that could leak into workerd from the outside."""
    ours = {var.env for var in VARIABLES}
    ours |= {"NOTIFY_SOCKET", "PROMETHEUS_MULTIPROC_DIR", MARKER_ENV}
    return {k: v for k, v in os.environ.items() if k not in ours}


@dataclass
class Workerd:
    """One running ``python -m workerd`` and what it wrote."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    err_path: Path
    port: int
    marker: str
    new_session: bool

    @property
    def pid(self) -> int:
        """Return the supervisor's pid."""
        return self.proc.pid

    # -- logs --------------------------------------------------------------------------------

    def logs(self) -> list[dict[str, Any]]:
        """Return every complete JSON line written so far, in file order."""
        records = []
        for raw in self.log_path.read_bytes().split(b"\n")[:-1]:
            with contextlib.suppress(ValueError):
                record = json.loads(raw)
                if isinstance(record, dict):
                    records.append(record)
        return records

    def events(self, event: str, **match: Any) -> list[dict[str, Any]]:
        """Return the log records of `event` whose fields equal `match`."""
        return [
            rec
            for rec in self.logs()
            if rec.get("event") == event and all(rec.get(k) == v for k, v in match.items())
        ]

    def wait_for(
        self, event: str, *, timeout: float = 10.0, count: int = 1, **match: Any
    ) -> list[dict[str, Any]]:
        """Wait until `event` (matching `match`) was logged `count` times; return the records."""

        def seen() -> list[dict[str, Any]]:
            found = self.events(event, **match)
            if len(found) < count and self.proc.poll() is not None:
                found = self.events(event, **match)  # the exit may have raced the read
                if len(found) < count:
                    raise AssertionError(
                        f"workerd exited ({self.proc.returncode}) before logging {count}× "
                        f"{event} {match}\n{self.tail()}"
                    )
            return found if len(found) >= count else []

        return wait_until(seen, timeout, f"{count}× {event} {match}")

    def tail(self, lines: int = 30) -> str:
        """Return the end of stdout and stderr, for failure messages."""
        out = self.log_path.read_text(errors="replace").splitlines()[-lines:]
        err = self.err_path.read_text(errors="replace").splitlines()[-lines:]
        return "stdout:\n" + "\n".join(out) + "\nstderr:\n" + "\n".join(err)

    def stderr(self) -> str:
        """Return everything written to stderr."""
        return self.err_path.read_text(errors="replace")

    # -- children ----------------------------------------------------------------------------

    def children(self, kind: str | None = None) -> list[int]:
        """Return the pids of children spawned and not yet reaped, per the supervisor's log."""
        exited = {rec["child_pid"] for rec in self.events("child_exited")}
        return [
            rec["child_pid"]
            for rec in self.events("child_spawned")
            if rec["child_pid"] not in exited and (kind is None or rec["kind"] == kind)
        ]

    def processes(self) -> list[int]:
        """Return every live process of this run (the supervisor and its children)."""
        return marked_processes(self.marker)

    def wait_no_processes(self, timeout: float = LEFTOVER_TIMEOUT) -> None:
        """Wait until no process of this run is left."""
        wait_until(lambda: not self.processes(), timeout, "every workerd process to exit")

    # -- HTTP --------------------------------------------------------------------------------

    def http(self, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
        """Send one request to the observability port; return (status, headers, body)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        try:
            conn.request(method, path)
            response = conn.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            conn.close()

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Wait until GET /ready answers 200; fail at once if workerd exits."""

        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"workerd exited ({self.proc.returncode}) before /ready\n{self.tail()}"
                )
            try:
                return self.http("/ready")[0] == 200
            except OSError:
                return False

        wait_until(ready, timeout, "/ready to answer 200")

    # -- lifecycle ---------------------------------------------------------------------------

    def signal(self, sig: signal.Signals) -> None:
        """Send `sig` to the supervisor alone."""
        os.kill(self.pid, sig)

    def signal_group(self, sig: signal.Signals) -> None:
        """Send `sig` to every process of the group at once, as systemd and Heroku do."""
        assert self.new_session, "start it with new_session=True to own a process group"
        os.killpg(self.pid, sig)

    def wait_exit(self, timeout: float) -> int:
        """Wait for the supervisor to exit; return its exit code; fail after `timeout`."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"workerd still running {timeout:g}s later\n{self.tail()}"
            ) from None

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM the supervisor, SIGKILL it after `timeout`; return its exit code."""
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    if self.new_session:
                        os.killpg(self.pid, signal.SIGKILL)
                    else:
                        os.kill(self.pid, signal.SIGKILL)
                self.proc.wait(timeout=timeout)
        return self.proc.returncode


@pytest.fixture
def start_workerd(
    r: redis.Redis, redis_server: RedisServer, tmp_path: Path
) -> Iterator[Callable[..., Workerd]]:
    """Return a factory that starts ``python -m workerd`` on the private Redis.

    Keyword arguments are environment variables (None unsets one of the defaults; a
    PYTHONPATH is searched after the repository); ``wait_ready=False`` returns at once,
    ``new_session=True`` gives it its own process group.
    """
    started: list[Workerd] = []

    def start(*, wait_ready: bool = True, new_session: bool = False, **env: str | None) -> Workerd:
        index = len(started)
        marker = uuid.uuid4().hex
        port = free_port()
        settings = {
            **BASE_ENV,
            "REDIS_URL": redis_server.url,
            "PORT_WORKER": str(port),
            "TASKFORGE_HANDLERS": HANDLERS,
            **env,
        }
        full_env = _scrubbed_environment()
        full_env.update({k: v for k, v in settings.items() if v is not None})
        path = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        full_env.update({MARKER_ENV: marker, "PYTHONPATH": path})
        log_path, err_path = tmp_path / f"workerd{index}.log", tmp_path / f"workerd{index}.err"
        with open(log_path, "ab") as out, open(err_path, "ab") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "workerd"],
                cwd=ROOT,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=new_session,
            )
        workerd = Workerd(proc, log_path, err_path, port, marker, new_session)
        started.append(workerd)
        if wait_ready:
            workerd.wait_ready()
        return workerd

    try:
        yield start
    finally:
        problems = []
        for workerd in started:
            workerd.stop()
        for workerd in started:
            with contextlib.suppress(AssertionError):
                workerd.wait_no_processes()
            leftovers = workerd.processes()
            for pid in leftovers:  # ours: they carry this run's marker
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if leftovers:
                problems.append(f"workerd {workerd.pid} left processes behind: {leftovers}")
        if problems:
            pytest.fail("; ".join(problems))


class Engine:
    """Enqueue through the engine's scripts and watch jobs in Redis."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self.keys = Keys()
        self.scripts = Scripts(client, self.keys)

    def enqueue(self, job_type: str, payload: Any = None, **fields: Any) -> str:
        """Enqueue one job (body fields as POST /enqueue takes them); return its id."""
        body = {"type": job_type, **fields}
        if payload is not None:
            body["payload"] = payload
        job_id = str(uuid.uuid4())
        result = self.scripts.enqueue(validate_enqueue(body), job_id)
        assert result.created, result
        return job_id

    def job(self, job_id: str) -> Job:
        """Return a job that must exist."""
        found = get_job(self.redis, self.keys, job_id)
        assert found is not None, f"job {job_id} does not exist"
        return found

    def wait_for(
        self, job_id: str, states: Collection[JobState] | JobState, timeout: float = 10.0
    ) -> Job:
        """Poll until the job is in one of `states`; return it."""
        wanted = {states} if isinstance(states, JobState) else set(states)

        def reached() -> Job | None:
            job = get_job(self.redis, self.keys, job_id)
            return job if job is not None and job.status in wanted else None

        return wait_until(reached, timeout, f"job {job_id} to be {sorted(wanted)}")

    def wait_all(
        self, job_ids: Collection[str], states: Collection[JobState], timeout: float
    ) -> dict[str, Job]:
        """Poll until every job is in one of `states`; return them by id."""
        wanted = set(states)

        def reached() -> dict[str, Job] | None:
            pipe = self.redis.pipeline(transaction=False)
            for job_id in job_ids:
                pipe.hgetall(self.keys.job(job_id))
            jobs = {
                i: Job.from_hash(raw) for i, raw in zip(job_ids, pipe.execute(), strict=True) if raw
            }
            done = len(jobs) == len(job_ids) and all(j.status in wanted for j in jobs.values())
            return jobs if done else None

        return wait_until(reached, timeout, f"{len(job_ids)} jobs to be {sorted(wanted)}")


@pytest.fixture
def engine(r: redis.Redis) -> Engine:
    """Return the enqueue-and-watch helper on the private (emptied) Redis."""
    return Engine(r)


class Journal:
    """The executions the test handlers recorded (tests/workerd/handlers_for_tests.py)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @property
    def file(self) -> str:
        """Return the path to put in a job's payload."""
        return str(self.path)

    def entries(self, event: str | None = None, job_id: str | None = None) -> list[dict[str, Any]]:
        """Return the recorded lines, filtered by event ("start"/"end") and job id."""
        if not self.path.exists():
            return []
        lines = self.path.read_text().split("\n")[:-1]  # complete lines only
        records = [json.loads(line) for line in lines if line.strip()]
        return [
            rec
            for rec in records
            if (event is None or rec["event"] == event) and (job_id is None or rec["id"] == job_id)
        ]

    def wait_for(
        self, event: str, job_id: str | None = None, *, count: int = 1, timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """Wait until `count` lines of `event` (for `job_id`) were recorded; return them."""

        def seen() -> list[dict[str, Any]]:
            found = self.entries(event, job_id)
            return found if len(found) >= count else []

        return wait_until(seen, timeout, f"{count}× journal {event} of {job_id or 'any job'}")


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    """Return an empty journal in the test's temporary directory."""
    return Journal(tmp_path / "journal.jsonl")
