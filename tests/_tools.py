"""Test helpers: external tools, and a private redis-server the tests may flush and kill."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest
import redis

START_TIMEOUT = 10.0  # seconds for a fresh redis-server to answer PING
POLL_INTERVAL = 0.01

T = TypeVar("T")


def in_ci() -> bool:
    """Return whether we run under CI, where a missing tool is a failure, not a skip."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require_tool(name: str) -> str:
    """Return the path of ``name`` on PATH; fail under CI, skip elsewhere, when it is missing."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not on PATH"
        if in_ci():
            pytest.fail(f"{message} (CI must provide it: bin/test installs what it can)")
        pytest.skip(message)
    return path


def wait_until(
    condition: Callable[[], T], timeout: float, what: str, interval: float = POLL_INTERVAL
) -> T:
    """Poll `condition` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class RedisServer:
    """A redis-server of our own on a fixed port: safe to FLUSHALL, kill and restart."""

    binary: str
    dir: Path
    port: int = field(default_factory=free_port)
    host: str = "127.0.0.1"
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Return the redis:// URL of database 0."""
        return f"redis://{self.host}:{self.port}/0"

    @property
    def unix_path(self) -> Path:
        """Return the path of the server's unix socket."""
        return self.dir / "redis.sock"

    @property
    def running(self) -> bool:
        """Return whether the server process is alive."""
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start the server (again, on the same port) and wait until it answers PING."""
        if self.running:
            return
        args = [self.binary, "--bind", self.host, "--port", str(self.port)]
        args += ["--save", "", "--appendonly", "no", "--dir", str(self.dir)]
        args += ["--unixsocket", str(self.unix_path), "--unixsocketperm", "700"]
        args += ["--logfile", str(self.dir / "redis.log")]
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL)
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
                        log = (self.dir / "redis.log").read_text(errors="replace")[-2000:]
                        self.kill()
                        raise RuntimeError(
                            f"redis-server on port {self.port} did not start:\n{log}"
                        ) from None
                    time.sleep(0.02)
        finally:
            client.close()

    def stop(self) -> None:
        """Stop the server gracefully (SIGTERM), killing it if it takes more than 10 s."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
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
