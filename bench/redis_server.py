"""Start a private redis-server on a free port for one benchmark run."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import redis


def free_port() -> int:
    """Return a TCP port that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def private_redis(*extra_args: str) -> Iterator[str]:
    """Yield the URL of a fresh redis-server (no persistence unless asked), stopped after."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not on PATH (bin/test installs it; or apt install it)")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="taskforge-bench-") as data_dir:
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", data_dir]
        args += ["--save", "", "--appendonly", "no", *extra_args]
        server = subprocess.Popen(args, stdout=subprocess.DEVNULL)
        try:
            client = redis.Redis(port=port)
            deadline = time.monotonic() + 10
            while True:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            server.terminate()
            server.wait(timeout=10)
