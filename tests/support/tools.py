"""Small helpers every suite and benchmark uses: ports, bounded waits, tools, /proc."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[2]  # the repository
POLL_INTERVAL = 0.01  # seconds between two looks at a condition

T = TypeVar("T")


def in_ci() -> bool:
    """Return whether we run under CI, where a missing tool is a failure, not a skip."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require_tool(name: str) -> str:
    """Return the path of ``name`` on PATH; fail under CI, skip elsewhere, when it is missing."""
    import pytest  # here, not at the top: bench/ imports this module and runs without pytest

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


def free_port_to_listen_on_later() -> int:
    """Return a free TCP port on 127.0.0.1 below the kernel's ephemeral range.

    For a test that lets clients try a port first and listens on it later: a port from the
    ephemeral range (what free_port gives) can be taken meanwhile as the source port of any
    outgoing connection, the clients' own retries included (a loopback connect to a port
    nobody listens on can connect to itself), and the later listen then fails.
    """
    with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
        ephemeral_low = int(ports.read().split()[0])
    first = 10_000
    for port in random.sample(range(first, ephemeral_low), min(200, ephemeral_low - first)):
        with socket.socket() as sock, contextlib.suppress(OSError):
            sock.bind(("127.0.0.1", port))
            return port
    raise RuntimeError(f"no free port between {first} and {ephemeral_low}")


def process_state(pid: int) -> str:
    """Return the state letter of `pid` in /proc ("R", "S", "T" stopped, "Z"…), "" if gone."""
    return process_state_of(str(pid))


def stopped(pid: int) -> bool:
    """Tell whether every thread of `pid` is stopped (state "T" in /proc): a SIGSTOP is sent at
    once but lands when the kernel gets to each thread, which on a loaded machine can be after
    the process has claimed and started one more job."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    return bool(tasks) and all(process_state_of(f"{pid}/task/{tid}") == "T" for tid in tasks)


def process_state_of(path: str) -> str:
    """process_state for /proc/<path>/stat (a pid, or <pid>/task/<tid>)."""
    try:
        with open(f"/proc/{path}/stat", "rb") as stat:
            # The command name may hold spaces and parentheses: the state follows the last ")".
            return stat.read().rsplit(b")", 1)[1].split()[0].decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    """Tell whether `pid` exists and is not a zombie."""
    return process_state(pid) not in ("", "Z")


def cpu_seconds(pid: int) -> float:
    """Return the user + system CPU time `pid` has used so far (from /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    # After the command name: state is field 3, utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
