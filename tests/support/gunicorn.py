"""The gateway under real gunicorn with deploy/gunicorn.conf.py, for tests and benchmarks."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.tools import ROOT, cpu_seconds, free_port, wait_until

BOOT_TIMEOUT = 20.0  # seconds for gunicorn to answer /health
STOP_TIMEOUT = 15.0  # seconds for SIGTERM to the group before SIGKILL


@dataclass
class Gunicorn:
    """A gateway under real gunicorn: its port, process and log file."""

    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        """Return the base URL requests go to."""
        return f"http://{self.host}:{self.port}"

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

    def cpu_seconds(self) -> float:
        """Return the CPU time the current workers have used so far."""
        return sum(cpu_seconds(pid) for pid in self.worker_pids())

    def log_lines(self) -> list[dict[str, Any]]:
        """Return the JSON lines gunicorn and the app wrote so far."""
        lines = []
        for line in self.log_path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                lines.append(json.loads(line))
        return lines

    def wait_ready(self) -> None:
        """Wait until /health answers (200, or 503 while Redis is down); fail if it exits."""

        def answers() -> bool:
            if self.process.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"gunicorn exited ({self.process.returncode}):\n{tail}")
            try:
                return self.request("GET", "/health", timeout=1)[0] in (200, 503)
            except OSError:
                return False

        try:
            wait_until(answers, BOOT_TIMEOUT, "gunicorn to answer /health", interval=0.05)
        except AssertionError as exc:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"gunicorn did not start: {exc}\n{tail}") from None

    def stop(self) -> None:
        """SIGTERM the whole process group, SIGKILL it after STOP_TIMEOUT."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


@contextlib.contextmanager
def run_gunicorn(
    redis_url: str,
    tmp: Path,
    *flags: str,
    port: int | None = None,
    host: str = "127.0.0.1",
    python: str = sys.executable,
    base_env: Mapping[str, str] | None = None,
    log_path: Path | None = None,
    app: str = "gateway:create_app()",
    **env: str,
) -> Iterator[Gunicorn]:
    """Run deploy/gunicorn.conf.py (on a free port unless given) with extra gunicorn `flags`;
    always stop it. `host` is where requests go; TASKFORGE_BIND_HOST in `env` is where it binds.
    `app`: the WSGI app gunicorn loads (a benchmark's probe wraps the gateway's).

    The environment is `base_env` (default: ours without TASKFORGE_* settings) plus the port,
    Redis, two workers and a metrics directory in `tmp`; `env` may replace any of them. The
    log goes to `log_path` (appended; default tmp/gunicorn-<port>.log).
    """
    port = port or free_port()
    if base_env is None:
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("TASKFORGE_")}
    full_env = dict(base_env)
    full_env.update(
        PORT=str(port),
        REDIS_URL=redis_url,
        WEB_CONCURRENCY="2",
        PROMETHEUS_MULTIPROC_DIR=str(tmp / "metrics"),
        PYTHONPATH=str(ROOT),
    )
    full_env.update(env)  # a caller may replace any of the above
    log_path = log_path or tmp / f"gunicorn-{port}.log"
    argv = [python, "-m", "gunicorn", "-c", "deploy/gunicorn.conf.py", *flags]
    with log_path.open("ab") as log_file:
        process = subprocess.Popen(
            [*argv, app],
            cwd=ROOT,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Gunicorn(port, process, log_path, host)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
