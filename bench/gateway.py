"""Benchmark the gateway under real gunicorn against a private redis-server.

Prints requests/s of single ``POST /enqueue`` from 16 concurrent clients (keep-alive where the
worker class allows) and jobs/s through ``POST /enqueue/batch`` with 100 and 1,000 jobs a
request. The load comes from a separate process: a selector loop over raw sockets, so the
client costs little next to the server. Run from the repository root:
``python -m bench.gateway`` (``--help``; ``--compare`` measures the worker classes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import platform
import selectors
import socket
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis

from shared.engine.keys import Keys
from tests.support.gunicorn import Gunicorn, run_gunicorn
from tests.support.redis_server import private_redis

JOB = {"type": "bench", "priority": 1, "payload": {"to": "user@example.com", "n": 1}}
SLOW_INTERVAL = 0.5  # seconds between the bytes a slow client sends
SLOW_HEAD_START = 1.0  # seconds the slow clients trickle before the fast ones start


def http_request(path: str, body: bytes) -> bytes:
    """Return one HTTP/1.1 POST as bytes."""
    head = f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


@dataclass
class Conn:
    """One client connection of the load loop."""

    sock: socket.socket | None = None
    out: bytes = b""
    buf: bytearray = field(default_factory=bytearray)
    need: int | None = None  # bytes of the whole response, once its head is read
    close_after: bool = False


class Load:
    """Keep `connections` clients busy with `request` until `seconds` pass."""

    def __init__(self, port: int, request: bytes, connections: int, slow: int = 0) -> None:
        self.port, self.request = port, request
        self.sel = selectors.DefaultSelector()
        self.statuses: Counter[int] = Counter()
        self.connections = [Conn() for _ in range(connections)]
        self.slow = [self._connect_slow() for _ in range(slow)]

    def _connect(self, conn: Conn) -> None:
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        conn.sock = sock
        self._send(conn)

    def _connect_slow(self) -> socket.socket:
        """Open a client that sends a valid request one byte every SLOW_INTERVAL."""
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.setblocking(False)
        return sock

    def _send(self, conn: Conn) -> None:
        conn.out, conn.buf, conn.need = self.request, bytearray(), None
        self.sel.register(conn.sock, selectors.EVENT_WRITE, conn)

    def _writable(self, conn: Conn) -> None:
        sent = conn.sock.send(conn.out)
        conn.out = conn.out[sent:]
        if not conn.out:
            self.sel.modify(conn.sock, selectors.EVENT_READ, conn)

    def _readable(self, conn: Conn) -> None:
        chunk = conn.sock.recv(262144)
        if not chunk:
            raise ConnectionError("server closed the connection mid-response")
        conn.buf += chunk
        if conn.need is None:
            end = conn.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(conn.buf[:end]).lower()
            length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
            conn.need = end + 4 + length
            conn.close_after = b"connection: close" in head
            self.statuses[int(head[9:12])] += 1
        if len(conn.buf) >= conn.need:
            self.sel.unregister(conn.sock)
            if conn.close_after:
                conn.sock.close()
                self._connect(conn)
            else:
                self._send(conn)

    def _trickle(self, sent: int) -> int:
        """Send each slow client its next byte; return how many bytes each has sent."""
        for sock in self.slow:
            with contextlib.suppress(OSError):
                sock.send(self.request[sent : sent + 1])
        return min(sent + 1, len(self.request) - 1)

    def run(self, seconds: float) -> float:
        """Run the loop; return the seconds it ran. Slow clients get a head start."""
        slow_sent, next_slow = 0, time.perf_counter()
        if self.slow:
            # They already hold what they can when the fast clients arrive, as in an attack.
            head_start = next_slow + SLOW_HEAD_START
            while (now := time.perf_counter()) < head_start:
                if now >= next_slow:
                    slow_sent, next_slow = self._trickle(slow_sent), now + SLOW_INTERVAL
                time.sleep(0.01)
        for conn in self.connections:
            self._connect(conn)
        started = time.perf_counter()
        deadline = started + seconds
        while (now := time.perf_counter()) < deadline:
            if self.slow and now >= next_slow:
                slow_sent, next_slow = self._trickle(slow_sent), now + SLOW_INTERVAL
            for key, events in self.sel.select(timeout=0.05):
                if events & selectors.EVENT_WRITE:
                    self._writable(key.data)
                else:
                    self._readable(key.data)
        return time.perf_counter() - started


def _load_child(port: int, request: bytes, connections: int, slow: int, seconds: float, out):
    load = Load(port, request, connections, slow)
    elapsed = load.run(seconds)
    out.send((dict(load.statuses), elapsed))


def run_load(
    port: int, request: bytes, connections: int, seconds: float, slow: int = 0
) -> tuple[dict[int, int], float]:
    """Run a Load in a separate process; return its status counts and duration."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_load_child, args=(port, request, connections, slow, seconds, child))
    proc.start()
    if not parent.poll(seconds + 30):
        proc.kill()
        raise RuntimeError("load process did not report")
    statuses, elapsed = parent.recv()
    proc.join(10)
    return statuses, elapsed


@contextlib.contextmanager
def gunicorn(redis_url: str, *flags: str, workers: int | None = None) -> Iterator[Gunicorn]:
    """Run the gateway under gunicorn with deploy/gunicorn.conf.py; yield it."""
    env = {"LOG_LEVEL": "INFO"}
    if workers is not None:
        env["WEB_CONCURRENCY"] = str(workers)
    # Production logging (one JSON access line per request) is part of the cost measured; it
    # goes to /dev/null, as a process manager's pipe drained fast would take it.
    with (
        tempfile.TemporaryDirectory(prefix="taskforge-bench-gunicorn-") as tmp,
        run_gunicorn(redis_url, Path(tmp), *flags, log_path=Path(os.devnull), **env) as server,
    ):
        yield server


def measure_single(
    server: Gunicorn, seconds: float, clients: int, slow: int = 0
) -> tuple[float, float, int]:
    """Return 201s per second of POST /enqueue, the workers' CPU µs per request, jobs made."""
    request = http_request("/enqueue", json.dumps(JOB).encode())
    cpu = server.cpu_seconds()
    statuses, elapsed = run_load(server.port, request, clients, seconds, slow)
    cpu = server.cpu_seconds() - cpu
    if set(statuses) - {201}:
        raise RuntimeError(f"unexpected statuses: {statuses}")
    done = statuses.get(201, 0)
    return done / elapsed, cpu / done * 1e6 if done else float("nan"), done


def measure_batch(
    server: Gunicorn, size: int, seconds: float, clients: int
) -> tuple[float, float, int]:
    """Return jobs per second through POST /enqueue/batch, CPU µs per job, jobs made."""
    request = http_request("/enqueue/batch", json.dumps({"jobs": [JOB] * size}).encode())
    cpu = server.cpu_seconds()
    statuses, elapsed = run_load(server.port, request, clients, seconds)
    cpu = server.cpu_seconds() - cpu
    if set(statuses) - {201}:
        raise RuntimeError(f"unexpected statuses: {statuses}")
    jobs = statuses.get(201, 0) * size
    return jobs / elapsed, cpu / jobs * 1e6 if jobs else float("nan"), jobs


COMPARED = (
    ("sync", 2, 1),
    ("sync", 4, 1),
    ("gthread", 2, 2),
    ("gthread", 2, 4),
    ("gthread", 2, 8),
    ("gthread", 2, 16),
    ("gthread", 2, 32),
    ("gthread", 3, 8),
)
WORKER_CLASSES = {
    "sync": ("-k", "sync"),
    "gthread": ("-k", "gthread"),
}


def compare(url: str, seconds: float, clients: int, slow: int, rounds: int) -> None:
    """Print single-enqueue req/s per worker setup, without and with slow clients (medians)."""
    figures: dict[tuple[str, int, int], list[tuple[float, float, float]]] = {
        setup: [] for setup in COMPARED
    }
    for _ in range(rounds):  # interleaved, so a busy moment on the machine hits every setup
        for setup in COMPARED:
            name, workers, threads = setup
            flags = (*WORKER_CLASSES[name], "--threads", str(threads))
            with gunicorn(url, *flags, workers=workers) as server:
                measure_single(server, 1.0, clients)  # warm up
                fast, cpu, _ = measure_single(server, seconds, clients)
            # A fresh server: slow clients must not find threads already taken by the last run.
            with gunicorn(url, *flags, workers=workers) as server:
                slowed, _, _ = measure_single(server, seconds, clients, slow=slow)
            figures[setup].append((fast, cpu, slowed))
    print(
        f"{'class':>8} {'workers':>7} {'threads':>7}  {'req/s':>7}  {'worker CPU µs/req':>17}"
        f"  {f'req/s, {slow} slow clients':>22}"
    )
    for (name, workers, threads), runs in figures.items():
        fast, cpu, slowed = (statistics.median(run[i] for run in runs) for i in range(3))
        print(
            f"{name:>8} {workers:>7} {threads:>7}  {fast:>7,.0f}  {cpu:>17,.0f}  {slowed:>22,.0f}"
        )


def figures(url: str, args: argparse.Namespace) -> dict[str, tuple[float, float, int]]:
    """Measure single and batched enqueue on one gunicorn; check Redis holds every job."""
    with gunicorn(url) as server:
        runs = {"warm-up": measure_single(server, 1.0, args.clients)}
        runs["single"] = measure_single(server, args.seconds, args.clients)
        for size in (100, 1000):
            runs[f"batch {size}"] = measure_batch(server, size, args.seconds, args.batch_clients)
    pending = redis.Redis.from_url(url).zcard(Keys().pending)
    created = sum(run[2] for run in runs.values())
    # The load stops with requests in flight: the server completes them, nobody reads them.
    in_flight = 2 * args.clients + args.batch_clients * (100 + 1000)
    if not created <= pending <= created + in_flight:
        raise RuntimeError(f"{created:,} jobs answered 201 but Redis holds {pending:,}")
    print(f"{created:,} jobs answered 201; Redis holds {pending:,} (the rest were in flight)")
    return runs


def main() -> None:
    """Run the benchmark and print the figures (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per figure")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--batch-clients", type=int, default=4)
    parser.add_argument("--compare", action="store_true", help="compare worker classes")
    parser.add_argument("--slow", type=int, default=16, help="slow clients in --compare")
    parser.add_argument("--rounds", type=int, default=3, help="--compare runs; median shown")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    print(f"commit {commit or '?'} · {platform.platform()} · {os.cpu_count()} cpus")
    with private_redis() as redis_server:
        url = redis_server.url
        if args.compare:
            compare(url, args.seconds, args.clients, args.slow, args.rounds)
            return
        runs = figures(url, args)
    print(f"load average at the end: {Path('/proc/loadavg').read_text().split()[0]}")
    rate, cpu, _ = runs["single"]
    print(
        f"POST /enqueue, {args.clients} clients: {rate:>9,.0f} requests/s  ({cpu:,.0f} µs worker CPU each)"
    )
    for size in (100, 1000):
        rate, cpu, _ = runs[f"batch {size}"]
        print(
            f"POST /enqueue/batch, {size:>4} jobs, {args.batch_clients} clients: "
            f"{rate:>9,.0f} jobs/s  ({cpu:,.1f} µs worker CPU per job)"
        )
    if args.json:
        args.json.write_text(json.dumps({"commit": commit, **runs}, indent=2))


if __name__ == "__main__":
    main()
