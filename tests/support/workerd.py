"""A real ``python -m workerd`` supervisor for tests and benchmarks: start, watch, stop.

`start_workerd(settings, log_path, err_path)` starts a supervisor (same interpreter) with its JSON-lines
stdout in a file, and waits for ``/ready``. Each run carries a unique marker in its
environment, which every child inherits, so a scan of ``/proc/*/environ`` finds its processes
even once re-parented: `stop_all` stops supervisors and reports any process left behind.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared.settings.config import VARIABLES
from tests.support.tools import ROOT, wait_until

# Every process of one workerd run inherits this variable: how leftovers are found.
MARKER_ENV = "TASKFORGE_TEST_RUN"
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


def scrubbed_environment() -> dict[str, str]:
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


def start_workerd(
    settings: Mapping[str, str | None],
    log_path: Path,
    err_path: Path,
    *,
    wait_ready: bool = True,
    ready_timeout: float = READY_TIMEOUT,
    new_session: bool = False,
) -> Workerd:
    """Start ``python -m workerd`` with `settings` (PORT_WORKER among them) over a scrubbed
    environment: None unsets a setting; a PYTHONPATH is searched after the repository."""
    marker = uuid.uuid4().hex
    port = int(settings["PORT_WORKER"] or 0)
    env = scrubbed_environment()
    env.update({k: v for k, v in settings.items() if v is not None})
    path = os.pathsep.join(p for p in (str(ROOT), settings.get("PYTHONPATH")) if p)
    env.update({MARKER_ENV: marker, "PYTHONPATH": path})
    with open(log_path, "ab") as out, open(err_path, "ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "workerd"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=new_session,
        )
    workerd = Workerd(proc, log_path, err_path, port, marker, new_session)
    if wait_ready:
        try:
            workerd.wait_ready(ready_timeout)
        except BaseException:
            stop_all([workerd])
            raise
    return workerd


def stop_all(started: Iterable[Workerd]) -> list[str]:
    """Stop every supervisor, kill whatever it left behind; return one problem per leftover."""
    started = list(started)
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
    return problems


@contextlib.contextmanager
def running_workerd(settings: Mapping[str, str], prefix: str) -> Iterator[Workerd]:
    """Run one `python -m workerd` with `settings`, its logs in a temporary folder named with
    `prefix`, until the block ends (the benchmarks' host)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        supervisor = start_workerd(settings, Path(tmp) / "workerd.log", Path(tmp) / "workerd.err")
        try:
            yield supervisor
        finally:
            stop_all([supervisor])
