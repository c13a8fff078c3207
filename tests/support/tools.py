"""Small helpers every suite and benchmark uses: ports, bounded waits, tools, /proc."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

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


def commands_caused(client: Any, action: Callable[[], object]) -> Counter[str]:
    """Run `action`; return the Redis commands it caused on `client`'s server, by name (a
    script's own included; INFO and the statistics reset excluded)."""
    client.config_resetstat()
    action()
    stats = client.info("commandstats")
    counts = Counter({k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()})
    for own in ("info", "config|resetstat"):
        counts.pop(own, None)
    return counts


def waiting_in_blpop(client: Any, pid: int | None = None) -> bool:
    """Tell whether a client of `client`'s server is blocked in a BLPOP (an idle worker's
    wait; another test's blocked reader, an XREAD, is not): any, or one of process `pid`'s
    connections (named taskforge-<role>-<pid>, shared.connect.redis_conn)."""
    return any(
        c["cmd"] == "blpop" and "b" in c["flags"] and (pid is None or c["name"].endswith(f"-{pid}"))
        for c in client.client_list()
    )


def free_port() -> int:
    """Return a TCP port on 127.0.0.1, free a moment ago, for a server a test starts on it.

    It comes from outside the kernel's ephemeral range where there is room, never from a bind
    to port 0: a port from that range can be taken before the server listens, as the port the
    kernel hands the next bind to 0 (another test's server: CI once saw bin/run refuse its
    gateway port as "already in use") or as the source port of any outgoing connection, a
    client's own retries of the port included (a loopback connect to a port nobody listens on
    can connect to itself). A machine whose ephemeral range leaves no room gets a bind to 0.
    """
    low, high = ephemeral_range()
    room = [port for span in (range(10_000, low), range(high + 1, 65_536)) for port in span]
    if len(room) >= 1_000:
        for port in random.sample(room, 200):
            with socket.socket() as sock, contextlib.suppress(OSError):
                sock.bind(("127.0.0.1", port))
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ephemeral_range() -> tuple[int, int]:
    """Return the kernel's ephemeral port range (what a bind to port 0 gets), ends included."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
        low, high = ports.read().split()[:2]
    return int(low), int(high)


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


def cpu_seconds(pid: int, *, children: bool = False, proc: Path = Path("/proc")) -> float:
    """Return the user + system CPU time `pid` has used so far (from /proc/<pid>/stat); with
    `children`, that of the children it has reaped too (cutime, cstime)."""
    with open(proc / str(pid) / "stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    # After the command name: state is field 3, utime and stime are fields 14 and 15, the
    # reaped children's cutime and cstime 16 and 17.
    ticks = sum(int(fields[i]) for i in ((11, 12, 13, 14) if children else (11, 12)))
    return ticks / os.sysconf("SC_CLK_TCK")
