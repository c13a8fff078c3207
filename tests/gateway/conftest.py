"""Fixtures for the gateway tests: the app on fakeredis, and real gunicorn on the private Redis."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from gateway import create_app
from shared.config import Settings
from shared.scripts import Policy, Scripts
from tests._tools import RedisServer, free_port
from tests.fakes import fake_scripts

ROOT = Path(__file__).resolve().parents[2]
BOOT_TIMEOUT = 20.0  # seconds for gunicorn to answer /health
STOP_TIMEOUT = 15.0
TOKEN = "s3cret-token"


@pytest.fixture
def scripts() -> Scripts:
    """Return engine scripts on a fresh fakeredis."""
    return fake_scripts(Policy(idempotency_ttl_ms=60_000))


def make_app(scripts: Scripts, **env: str) -> Flask:
    """Return a gateway app on `scripts` with settings from `env`."""
    app = create_app(Settings.from_env(env), scripts=scripts)
    app.testing = True
    return app


@pytest.fixture
def client(scripts: Scripts) -> FlaskClient:
    """Return a test client of an open (no token) gateway on fakeredis."""
    return make_app(scripts).test_client()


@dataclass
class Gunicorn:
    """A gateway under real gunicorn: its port, process and log file."""

    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    host: str = "127.0.0.1"

    def request(
        self,
        method: str,
        path: str,
        body: bytes | str | dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 10.0,
    ) -> tuple[int, dict[str, str], Any]:
        """Send one request on a new connection; return status, headers, decoded body."""
        if isinstance(body, dict):
            body = json.dumps(body)
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            raw = response.read()
            hdrs = {k.lower(): v for k, v in response.getheaders()}
        finally:
            conn.close()
        doc: Any = raw
        if hdrs.get("content-type", "").startswith("application/json") and raw:
            doc = json.loads(raw)
        return response.status, hdrs, doc

    def worker_pids(self) -> list[int]:
        """Return the pids of the gunicorn workers."""
        path = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        return [int(pid) for pid in path.read_text().split()]

    def log_lines(self) -> list[dict[str, Any]]:
        """Return the JSON lines gunicorn and the app wrote so far."""
        lines = []
        for line in self.log_path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                lines.append(json.loads(line))
        return lines


def _wait_ready(server: Gunicorn) -> None:
    deadline = time.monotonic() + BOOT_TIMEOUT
    while True:
        try:
            if server.request("GET", "/health", timeout=1)[0] in (200, 503):
                return
        except OSError:
            pass
        if server.process.poll() is not None or time.monotonic() > deadline:
            tail = server.log_path.read_text()[-3000:]
            raise RuntimeError(f"gunicorn did not start:\n{tail}")
        time.sleep(0.05)


@contextlib.contextmanager
def run_gunicorn(
    redis_url: str, tmp: Path, *, port: int | None = None, host: str = "127.0.0.1", **env: str
) -> Iterator[Gunicorn]:
    """Run deploy/gunicorn.conf.py (on a free port unless given); always stop it (SIGTERM,
    then SIGKILL). `host` is where requests go; TASKFORGE_BIND_HOST in `env` is where it binds.
    """
    port = port or free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("TASKFORGE_")}
    full_env.update(
        PORT=str(port),
        REDIS_URL=redis_url,
        WEB_CONCURRENCY="2",
        PROMETHEUS_MULTIPROC_DIR=str(tmp / "metrics"),
        PYTHONPATH=str(ROOT),
    )
    full_env.update(env)  # a test may replace any of the above
    log_path = tmp / f"gunicorn-{port}.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "-c",
                "deploy/gunicorn.conf.py",
                "gateway:create_app()",
            ],
            cwd=ROOT,
            env=full_env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Gunicorn(port, process, log_path, host)
    try:
        _wait_ready(server)
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="session")
def gateway_server(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gunicorn]:
    """Run one open gateway under gunicorn for the session, on the private redis-server."""
    with run_gunicorn(redis_server.url, tmp_path_factory.mktemp("gunicorn")) as server:
        yield server


@pytest.fixture
def gw(gateway_server: Gunicorn, r: Any) -> Gunicorn:
    """Return the session's gateway with Redis emptied (and running) for this test."""
    return gateway_server


@pytest.fixture
def start_gateway(
    redis_server: RedisServer, tmp_path: Path
) -> Iterator[Callable[..., contextlib.AbstractContextManager[Gunicorn]]]:
    """Return a starter of extra gateways with their own environment (auth on, …)."""

    def start(**env: str) -> contextlib.AbstractContextManager[Gunicorn]:
        return run_gunicorn(redis_server.url, tmp_path, **env)

    yield start
