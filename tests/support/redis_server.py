"""A private redis-server on a fixed port: safe to FLUSHALL, freeze, kill -9 and restart.

Tests and benchmarks never touch a Redis they did not start. ``config`` holds the server's
``--name value`` settings (no persistence unless a caller asks for it); ``conf_file`` starts it
from a configuration file first (deploy/redis.conf), with the port, address and directory
still ours.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.support.tools import free_port, process_state, wait_until

START_TIMEOUT = 10.0  # seconds for a fresh redis-server to answer PING
STOP_TIMEOUT = 10.0  # seconds for SIGTERM before SIGKILL
FREEZE_TIMEOUT = 5.0  # seconds for the kernel to report a SIGSTOPped process as stopped
NO_PERSISTENCE = {"save": "", "appendonly": "no"}
NO_RETRY = Retry(NoBackoff(), 0)  # a test's own client sees every error as it happens


@dataclass
class RedisServer:
    """One redis-server process of ours, restartable on the same port and directory."""

    binary: str
    dir: Path
    config: dict[str, str] = field(default_factory=lambda: dict(NO_PERSISTENCE))
    conf_file: Path | None = None
    unix_socket: bool = False  # off by default: a socket path may not exceed 107 bytes
    port: int = field(default_factory=free_port)
    host: str = "127.0.0.1"
    process: subprocess.Popen[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)  # added to ours (libfaketime's, say)

    @property
    def url(self) -> str:
        """Return the redis:// URL of database 0."""
        return f"redis://{self.host}:{self.port}/0"

    @property
    def unix_path(self) -> Path:
        """Return the path of the server's unix socket (start it with unix_socket=True)."""
        return self.dir / "redis.sock"

    @property
    def log_path(self) -> Path:
        """Return the server's log file."""
        return self.dir / "redis.log"

    @property
    def running(self) -> bool:
        """Return whether the server process is alive."""
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int:
        """Return the server's pid (it must be running)."""
        assert self.process is not None, "redis-server is not running"
        return self.process.pid

    def args(self) -> list[str]:
        """Return the command line: the conf file, then our address and files, then config."""
        args = [self.binary, *([str(self.conf_file)] if self.conf_file else [])]
        args += ["--bind", self.host, "--port", str(self.port), "--dir", str(self.dir)]
        args += ["--logfile", str(self.log_path)]
        if self.unix_socket:
            args += ["--unixsocket", str(self.unix_path), "--unixsocketperm", "700"]
        for name, value in self.config.items():
            args += [f"--{name}", value]
        return args

    def start(self) -> None:
        """Start the server (again: same port and directory, so it reloads its AOF) and wait
        until it answers PING."""
        if self.running:
            return
        self.process = subprocess.Popen(
            self.args(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env={**os.environ, **self.env} if self.env else None,
        )
        self._wait_for_ping()

    def _wait_for_ping(self) -> None:
        """Return once PING succeeds; raise with the log's tail if it does not within the bound."""
        client = redis.Redis(host=self.host, port=self.port, socket_connect_timeout=0.5)
        deadline = time.monotonic() + START_TIMEOUT
        try:
            while True:
                try:
                    client.ping()
                    return
                except redis.ConnectionError:
                    exited = self.process is not None and self.process.poll() is not None
                    if exited or time.monotonic() > deadline:
                        log = ""
                        if self.log_path.exists():
                            log = self.log_path.read_text(errors="replace")[-2000:]
                        self.kill()
                        raise RuntimeError(
                            f"redis-server on port {self.port} did not start:\n{log}"
                        ) from None
                    time.sleep(0.02)
        finally:
            client.close()

    def client(self, **options: object) -> redis.Redis:
        """Return a new client straight to this server (the caller's own: no retries)."""
        options = {"socket_timeout": 10, "retry": NO_RETRY, **options}
        return redis.Redis(host=self.host, port=self.port, **options)  # type: ignore[arg-type]

    def freeze(self) -> None:
        """SIGSTOP the server; return once the kernel reports it stopped."""
        os.kill(self.pid, signal.SIGSTOP)
        wait_until(lambda: process_state(self.pid) in ("T", "t"), FREEZE_TIMEOUT, "redis stopped")

    def thaw(self) -> None:
        """SIGCONT the server (harmless when it is not frozen)."""
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)

    def restart(self) -> None:
        """Stop the server gracefully and start it again on the same port and directory."""
        self.stop()
        self.start()

    def stop(self) -> None:
        """Stop the server gracefully (SIGTERM), killing it if it takes more than 10 s."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def kill(self) -> None:
        """Kill the server with SIGKILL, as a crash would."""
        if self.process is None:
            return
        self.process.kill()
        self.process.wait()
        self.process = None

    def close(self) -> None:
        """Thaw and stop the server whatever state a failed test left it in."""
        self.thaw()
        self.stop()


def redis_binary() -> str:
    """Return the path of redis-server for a benchmark, or exit saying how to get it."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not on PATH (bin/test installs it; or apt install it)")
    return binary


@contextlib.contextmanager
def private_redis(**config: str) -> Iterator[RedisServer]:
    """Yield a running redis-server in a temporary directory (no persistence unless `config`
    asks), stopped and removed when the block ends."""
    with tempfile.TemporaryDirectory(prefix="taskforge-redis-") as data_dir:
        server = RedisServer(redis_binary(), Path(data_dir), {**NO_PERSISTENCE, **config})
        server.start()
        try:
            yield server
        finally:
            server.close()
