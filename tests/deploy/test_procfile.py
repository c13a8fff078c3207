"""The Procfile under honcho, as on a Heroku-style host: start, serve, stop on SIGTERM.

honcho passes SIGTERM to every process type's process group at once, as Heroku does to every
process of a dyno (Heroku follows with SIGKILL after 30 s, honcho after only 5 s: the drain
grace here is shorter than both, and the test checks honcho never needed its SIGKILL).

Every test runs HONCHO_LINE, the README's command, through a shell from the repository root
with no virtualenv active; only the one that checks the README's ports keeps `-p 8080`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from gateway.app import AUTH_DISABLED
from shared.engine.keys import Keys
from shared.model.jobs import JobState
from shared.settings.config import VARIABLES
from tests.deploy.conftest import DEPLOY, ROOT
from tests.support.redis_server import RedisServer
from tests.support.tools import free_port, in_ci, wait_until
from tests.support.workerd import MARKER_ENV, marked_processes
from tests.workerd.conftest import Engine

# The README's line, verbatim (tests/test_readme.py checks it is there). honcho and the
# Procfile's gunicorn and python come from .venv without activating it; -p sets honcho's base
# port, the web process's PORT, which the README's curl commands use (honcho's default: 5000).
HONCHO_LINE = 'PATH="$PWD/.venv/bin:$PATH" honcho start -p 8080 web worker'
README_PORTS = (8080, 8081)  # the gateway (-p) and workerd (PORT_WORKER's default)
READY_TIMEOUT = 30.0
JOB_TIMEOUT = 15.0
STOP_TIMEOUT = 20.0


def _request(url: str, body: Any = None) -> tuple[int, Any]:
    """Send GET (or POST with a JSON body); return the status and the decoded JSON reply."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, json.loads(reply.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")
    except OSError:
        return 0, None  # not listening yet


class Stack:
    """HONCHO_LINE from the repository root, every process marked; `port` replaces 8080."""

    def __init__(
        self, redis_url: str, tmp_path: Path, drain_grace: str, port: int | None = None
    ) -> None:
        venv_bin = ROOT / ".venv" / "bin"
        if not (venv_bin / "honcho").exists():
            message = f"{venv_bin}/honcho is missing: bin/test creates .venv"
            if in_ci():
                pytest.fail(message)
            pytest.skip(message)
        line = HONCHO_LINE
        self.web_port, self.worker_port = README_PORTS
        if port is not None:
            line = HONCHO_LINE.replace("-p 8080 ", f"-p {port} ")
            assert line != HONCHO_LINE
            self.web_port, self.worker_port = port, free_port()
        self.marker = uuid.uuid4().hex
        self.log_path = tmp_path / "honcho.log"
        self.temp = tmp_path / "tmp"  # where gunicorn makes its metrics directory
        self.temp.mkdir()
        ours = {v.env for v in VARIABLES} | {"PORT", "NOTIFY_SOCKET", "PROMETHEUS_MULTIPROC_DIR"}
        ours |= {"VIRTUAL_ENV", "PWD"}  # no active virtualenv; the shell sets PWD itself
        env = {k: v for k, v in os.environ.items() if k not in ours}
        # As a user's shell without an activated venv: none of ours on PATH.
        not_ours = {str(venv_bin), str(Path(sys.executable).parent)}
        path = [d for d in env.get("PATH", "").split(os.pathsep) if d not in not_ours]
        env.update(
            {
                "PATH": os.pathsep.join(path),
                "TMPDIR": str(self.temp),
                "REDIS_URL": redis_url,
                "WORKER_COUNT": "2",
                "TASKFORGE_HANDLERS": "workerd.demo",  # the tests enqueue demo.noop and demo.sleep
                "WEB_CONCURRENCY": "1",
                "WORKER_DRAIN_GRACE": drain_grace,
                "TASK_VISIBILITY_TIMEOUT": "2s",
                MARKER_ENV: self.marker,
            }
        )
        if port is not None:
            env["PORT_WORKER"] = str(self.worker_port)
        with open(self.log_path, "wb") as log:
            # bash runs a one-command line by exec: SIGTERM to this pid reaches honcho.
            self.proc = subprocess.Popen(
                ["bash", "-c", line],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    @property
    def web(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def processes(self) -> list[int]:
        return marked_processes(self.marker)

    def wait_ready(self) -> None:
        for port in (self.web_port, self.worker_port):
            url = f"http://127.0.0.1:{port}/ready"

            def ready(url: str = url) -> bool:
                assert self.proc.poll() is None, f"honcho exited early:\n{self.log()}"
                return _request(url)[0] == 200

            wait_until(ready, READY_TIMEOUT, url)

    def stop(self) -> None:
        """Stop honcho with SIGTERM, as a host does, and wait until every process is gone."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=STOP_TIMEOUT)
        wait_until(
            lambda: not self.processes(), STOP_TIMEOUT, f"every process to exit\n{self.log()}"
        )

    def kill(self) -> list[int]:
        """Kill whatever is left (honcho and every marked process); return what was left."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        leftovers = self.processes()
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return leftovers


@pytest.fixture
def stack(
    r: redis.Redis, redis_server: RedisServer, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Stack]:
    """Start the Procfile's web and worker under honcho on the private, emptied Redis.

    The drain grace (3 s unless a test says otherwise through indirect parametrization)
    stays under honcho's 5 s between SIGTERM and SIGKILL, as 25 s stays under Heroku's 30 s.
    """
    stack = Stack(redis_server.url, tmp_path, getattr(request, "param", "3s"), free_port())
    try:
        stack.wait_ready()
        yield stack
        stack.stop()
    finally:
        leftovers = stack.kill()
    assert not leftovers, f"processes left after the test: {leftovers}\n{stack.log()}"


def _enqueue(stack: Stack, body: dict[str, Any]) -> str:
    status, job = _request(f"{stack.web}/enqueue", body)
    assert status == 201, (status, job)
    return job["id"]


def _status(stack: Stack, job_id: str) -> str:
    status, job = _request(f"{stack.web}/jobs/{job_id}")
    assert status == 200, (status, job)
    return job["status"]


def test_honcho_serves_jobs_and_stops_on_sigterm_without_losing_one(
    stack: Stack, r: redis.Redis
) -> None:
    ids = [_enqueue(stack, {"type": "demo.noop", "payload": {"n": n}}) for n in range(3)]
    for job_id in ids:
        wait_until(lambda j=job_id: _status(stack, j) == "completed", JOB_TIMEOUT, f"{job_id} done")

    sleeper = _enqueue(stack, {"type": "demo.sleep", "payload": {"seconds": 2}})
    wait_until(lambda: _status(stack, sleeper) == "processing", JOB_TIMEOUT, "the sleep job to run")
    stack.stop()
    log = stack.log()
    assert "sending SIGKILL" not in log, log  # all exited on SIGTERM, within honcho's 5 s
    job = Engine(r).job(sleeper)
    assert job.status in (JobState.COMPLETED, JobState.PENDING), job
    assert r.zcard(Keys().processing) == 0  # nothing left claimed by a process that is gone


@pytest.mark.parametrize("stack", ["1s"], indirect=True)
def test_honcho_sigterm_during_a_job_longer_than_the_grace_puts_it_back_to_pending(
    stack: Stack, r: redis.Redis
) -> None:
    job_id = _enqueue(stack, {"type": "demo.sleep", "payload": {"seconds": 30}})
    wait_until(lambda: _status(stack, job_id) == "processing", JOB_TIMEOUT, "the sleep job to run")
    stack.stop()
    log = stack.log()
    assert "sending SIGKILL" not in log, log  # released after the grace, before honcho's SIGKILL
    job = Engine(r).job(job_id)
    assert (job.status, job.attempts, job.recoveries) == (JobState.PENDING, 0, 0), job
    assert r.zcard(Keys().processing) == 0


def test_compose_health_checks_pass_against_the_running_services(stack: Stack) -> None:
    # The compose file's health check commands, run here against the same two servers.
    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    ports = {"gateway": (8080, stack.web_port), "workerd": (8081, stack.worker_port)}
    for name, (compose_port, port) in ports.items():
        kind, *command = services[name]["healthcheck"]["test"]
        assert kind == "CMD" and command[0] == "python"
        command = [
            sys.executable,
            *(a.replace(f":{compose_port}/", f":{port}/") for a in command[1:]),
        ]
        assert subprocess.run(command, timeout=10, check=False).returncode == 0, name


def _port_taken(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
@pytest.mark.serial  # the README's fixed ports, as tests/test_readme.py's bin/run tests use
def test_the_readme_line_serves_8080_and_8081_warns_once_and_cleans_up(
    r: redis.Redis, redis_server: RedisServer, tmp_path: Path
) -> None:
    taken = [port for port in README_PORTS if _port_taken(port)]
    if taken:
        message = f"the README's honcho line needs ports {README_PORTS}, but {taken} are in use"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    stack = Stack(redis_server.url, tmp_path, "3s")
    try:
        stack.wait_ready()
        assert stack.web == "http://127.0.0.1:8080"
        # The README's first curl, as its later ones do: localhost:8080.
        status, health = _request("http://localhost:8080/health")
        assert (status, health["status"]) == (200, "ok")
        job_id = _enqueue(stack, {"type": "demo.noop"})
        wait_until(lambda: _status(stack, job_id) == "completed", JOB_TIMEOUT, "the job to finish")
        # The Procfile keeps 0.0.0.0 (a platform routes to it) and no token is set: said once.
        warnings = [
            line for line in _json_lines(stack.log()) if line.get("warning") == AUTH_DISABLED
        ]
        assert [w["address"] for w in warnings] == ["0.0.0.0:8080"], warnings
        stack.stop()
        log = stack.log()
        assert "sending SIGKILL" not in log, log
        assert list(stack.temp.iterdir()) == []  # gunicorn's and workerd's metrics went with them
    finally:
        leftovers = stack.kill()
    assert not leftovers, f"processes left after the test: {leftovers}\n{stack.log()}"


def _json_lines(log: str) -> list[dict[str, Any]]:
    """Return the JSON objects in honcho's output (each line after honcho's prefix)."""
    found = []
    for line in log.splitlines():
        _, brace, rest = line.partition("{")
        with contextlib.suppress(ValueError):
            found.append(json.loads(brace + rest))
    return found
