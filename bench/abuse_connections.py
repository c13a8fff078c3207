"""Connection abuse against the gateway: idle floods and slowloris while enqueues run at a
fixed rate. Prints enqueue latency unloaded and under attack, /health probes, and
how the workers recover.

    .venv/bin/python -m bench.abuse_connections                 # 5,000 idle + 1,000 slow, 60 s
    .venv/bin/python -m bench.abuse_connections --seconds 20    # shorter
    .venv/bin/python -m bench.abuse_connections attack --port 8080 --idle 5000 --trickle 1000

The attacker is one process on one selector (so it costs the gateway little CPU on a small
machine): it holds `idle` connections that send nothing and `trickle` connections that send
one byte of a never-ending request head per second each, and opens a new one for every
connection the gateway closes, so the pressure lasts as long as the attack. The enqueues and
probes run on one asyncio loop in the calling process; a request's latency counts from the
moment it was due, so a stalled gateway cannot hide behind a stalled client.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import os
import resource
import selectors
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from tests.support.gunicorn import BOOT_TIMEOUT, Gunicorn, run_gunicorn
from tests.support.tools import ROOT, wait_until

ENQUEUE_BODY = b'{"type": "abuse", "payload": {"n": 1}}'
ENQUEUE = (
    b"POST /enqueue HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(ENQUEUE_BODY), ENQUEUE_BODY)
)
HEALTH = b"GET /health HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"
# A head that never ends: the request line, then one header value growing a byte at a time.
SLOW_HEAD = b"GET /health HTTP/1.1\r\nHost: bench\r\nX-Slow: "
REQUEST_TIMEOUT = 10.0  # seconds an enqueue or probe may take before it counts as failed
PROBE_INTERVAL = 0.5  # seconds between two GET /health
OPEN_PER_TICK = 500  # connections the attacker opens per tick while ramping up
TICK = 0.1  # seconds of the attacker's loop
LINGER = 2.0  # seconds the attacker holds on after the measured run
NEEDED_FILES = 8192  # RLIMIT_NOFILE the test and benchmark need


# --- the attacker (one process, one selector) -------------------------------------------------


@dataclass
class AttackCounts:
    """What the attacker saw: connections it opened, and how many the gateway closed."""

    opened: int = 0
    closed_by_gateway: int = 0
    connect_failed: int = 0
    bytes_trickled: int = 0


class Attacker:
    """Hold idle and trickling connections to host:port, reopening each one the gateway closes."""

    def __init__(self, host: str, port: int, idle: int, trickle: int) -> None:
        self.address = (host, port)
        self.wanted = {"idle": idle, "trickle": trickle}
        self.selector = selectors.DefaultSelector()
        self.conns: dict[socket.socket, tuple[str, int]] = {}  # kind, bytes sent
        self.counts = AttackCounts()

    def open_one(self, kind: str) -> None:
        """Start a non-blocking connect of one `kind` connection."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        code = sock.connect_ex(self.address)
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            self.counts.connect_failed += 1
            return
        self.conns[sock] = (kind, 0)
        self.selector.register(sock, selectors.EVENT_READ)
        self.counts.opened += 1

    def close(self, sock: socket.socket) -> None:
        """Forget and close one connection."""
        self.selector.unregister(sock)
        del self.conns[sock]
        sock.close()

    def tick(self, trickle_due: bool) -> None:
        """Notice closed connections, top both kinds up, send a byte on each trickler if due."""
        for key, _ in self.selector.select(0):
            sock = key.fileobj
            try:
                data = sock.recv(4096)  # type: ignore[union-attr]
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:  # the gateway closed it (or refused the connect)
                self.counts.closed_by_gateway += 1
                self.close(sock)  # type: ignore[arg-type]
        have = {"idle": 0, "trickle": 0}
        for kind, _ in self.conns.values():
            have[kind] += 1
        for kind, wanted in self.wanted.items():
            for _ in range(min(wanted - have[kind], OPEN_PER_TICK)):
                self.open_one(kind)
        if trickle_due:
            for sock, (kind, sent) in list(self.conns.items()):
                if kind == "trickle":
                    self.trickle(sock, sent)

    def trickle(self, sock: socket.socket, sent: int) -> None:
        """Send the next byte of a head that never ends."""
        byte = SLOW_HEAD[sent : sent + 1] or b"a"
        try:
            sock.send(byte)
        except (BlockingIOError, InterruptedError):
            return  # not connected yet, or its buffer is full: try next second
        except OSError:
            self.counts.closed_by_gateway += 1
            self.close(sock)
            return
        self.conns[sock] = ("trickle", sent + 1)
        self.counts.bytes_trickled += 1

    def full(self) -> bool:
        """Say whether every wanted connection is open (or at least connecting)."""
        return len(self.conns) >= sum(self.wanted.values())

    def run(self, seconds: float, ready: Path | None = None) -> AttackCounts:
        """Attack for `seconds` after the ramp; touch `ready` when all connections are open."""
        next_trickle = time.monotonic()
        end = None
        while end is None or time.monotonic() < end:
            now = time.monotonic()
            due = now >= next_trickle
            if due:
                next_trickle += 1.0
            self.tick(due)
            if end is None and self.full():
                end = time.monotonic() + seconds
                if ready is not None:
                    ready.touch()
            time.sleep(max(0.0, min(TICK, next_trickle - time.monotonic())))
        for sock in list(self.conns):
            self.close(sock)
        return self.counts


def raise_files_limit(needed: int = NEEDED_FILES) -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; fail below `needed`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise RuntimeError(f"RLIMIT_NOFILE hard limit is {hard}: this needs {needed} (ulimit -Hn)")
    target = hard if hard != resource.RLIM_INFINITY else max(soft, needed)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


@contextlib.contextmanager
def attacking(
    port: int, idle: int, trickle: int, seconds: float, tmp: Path
) -> Iterator[subprocess.Popen[str]]:
    """Run the attacker in its own process until it has every connection open; yield it."""
    ready = tmp / "attack-ready"
    ready.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "bench.abuse_connections", "attack", "--port", str(port)]
    # It holds on a little past the measured run: its closing everything at once is the
    # "afterwards" the caller checks, not part of the run it measures.
    argv += ["--idle", str(idle), "--trickle", str(trickle), "--seconds", str(seconds + LINGER)]
    proc = subprocess.Popen(
        [*argv, "--ready", str(ready)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the attacker did not open its connections ({proc.returncode})")
            time.sleep(0.05)
        yield proc
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=seconds + 30)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def attack_counts(proc: subprocess.Popen[str]) -> AttackCounts:
    """Return the counts an attacker process printed when it ended."""
    out = proc.stdout.read() if proc.stdout else ""
    return AttackCounts(**json.loads(out.strip().splitlines()[-1]))


# --- the measured clients (asyncio, in the calling process) ----------------------------------


@dataclass
class Sample:
    """One request: its status (0: no answer in time) and latency from when it was due (s)."""

    status: int
    latency: float
    due: float  # time.monotonic()


async def one_request(host: str, port: int, request: bytes, due: float) -> Sample:
    """Send `request` on a new connection; read its answer (Content-Length)."""

    async def exchange() -> int:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            return int(head.split(b" ", 2)[1])
        finally:
            writer.close()

    try:
        status = await asyncio.wait_for(exchange(), REQUEST_TIMEOUT)
    except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError):
        status = 0
    return Sample(status, time.monotonic() - due, due)


async def paced(host: str, port: int, request: bytes, rate: float, seconds: float) -> list[Sample]:
    """Send `request` `rate` times a second for `seconds`, whatever the answers' speed."""
    start = time.monotonic()
    tasks = []
    for i in range(int(rate * seconds)):
        due = start + i / rate
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        tasks.append(asyncio.create_task(one_request(host, port, request, due)))
    return list(await asyncio.gather(*tasks))


async def enqueues_and_probes(
    host: str, port: int, rate: float, seconds: float
) -> tuple[list[Sample], list[Sample]]:
    """Run paced enqueues and /health probes side by side; return both."""
    enqueues, probes = await asyncio.gather(
        paced(host, port, ENQUEUE, rate, seconds),
        paced(host, port, HEALTH, 1 / PROBE_INTERVAL, seconds),
    )
    return enqueues, probes


def p99(samples: list[Sample]) -> float:
    """Return the 99th percentile latency (s) of `samples`."""
    latencies = sorted(s.latency for s in samples)
    return latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]


def each_second(samples: list[Sample], rate: float) -> list[float]:
    """Return the p99 (ms) of each second's worth of paced `samples`."""
    step = int(rate)
    return [round(p99(samples[i : i + step]) * 1000, 1) for i in range(0, len(samples), step)]


def open_files(pid: int) -> int:
    """Return how many descriptors process `pid` holds."""
    return len(os.listdir(f"/proc/{pid}/fd"))


# --- the whole run ------------------------------------------------------------------------------


@dataclass
class AbuseReport:
    """Figures of one run (latencies in ms)."""

    unloaded_p99_ms: float  # before and after the attack together
    before_p99_ms: float
    after_p99_ms: float
    loaded_p99_ms: float
    loaded_p50_ms: float
    loaded_p99_ms_each_second: list[float]  # of the attack: when the slow ones came
    unloaded_p99_ms_each_second: list[float]  # before, then after: the neighbours' share
    enqueues: int  # under attack
    enqueue_failures: int  # any run: not 201 within REQUEST_TIMEOUT
    failed_statuses: dict[str, int]  # "<run> <status>" (0: no answer): before, loaded, after
    probes: int
    probe_failures: int
    slowest_probe_ms: float
    worker_cpu_unloaded: float  # cores the gateway's workers used
    worker_cpu_loaded: float
    worker_pids: list[int]
    worker_fds_before: list[int]
    worker_fds_peak: list[int]
    worker_fds_after: list[int]
    fresh_request_ms: float
    attack: AttackCounts


def measured(gw: Gunicorn, rate: float, seconds: float) -> tuple[list[Sample], list[Sample], float]:
    """Return paced enqueues, probes, and the workers' CPU (cores) over `seconds`."""
    cpu, start = gw.cpu_seconds(), time.monotonic()
    enqueues, probes = asyncio.run(enqueues_and_probes(gw.host, gw.port, rate, seconds))
    return enqueues, probes, (gw.cpu_seconds() - cpu) / (time.monotonic() - start)


def abuse(
    gw: Gunicorn,
    tmp: Path,
    idle: int,
    trickle: int,
    seconds: float,
    rate: float,
    baseline: float,
    workers: int = 2,
) -> AbuseReport:
    """Measure enqueues unloaded for `baseline` s, under attack for `seconds`, unloaded again
    (`workers`: WEB_CONCURRENCY, tests.support.gunicorn's 2 unless told).

    The unloaded figure pools the runs before and after the attack: on a shared machine a
    neighbour's burst in one of them would otherwise decide the comparison.
    """
    # /health answers as soon as one worker is up: wait for all, and for their warm-up.
    pids = wait_until(
        lambda: len(gw.worker_pids()) == workers and gw.worker_pids(), BOOT_TIMEOUT, "workers"
    )
    measured(gw, rate, 2.0)  # warm up: Redis pools, caches, threads
    fds_before = [open_files(pid) for pid in pids]
    before, _, cpu_unloaded = measured(gw, rate, baseline)
    with attacking(gw.port, idle, trickle, seconds, tmp) as proc:
        fds_peak = [open_files(pid) for pid in pids]
        loaded, probes, cpu_loaded = measured(gw, rate, seconds)
        fds_peak = [max(a, open_files(pid)) for a, pid in zip(fds_peak, pids, strict=True)]
    counts = attack_counts(proc)
    started = time.monotonic()
    status = gw.request("GET", "/health", timeout=REQUEST_TIMEOUT)[0]
    fresh = (time.monotonic() - started) * 1000 if status == 200 else float("inf")
    fds_after = [open_files(pid) for pid in pids]
    after, _, _ = measured(gw, rate, baseline)
    return AbuseReport(
        unloaded_p99_ms=p99(before + after) * 1000,
        before_p99_ms=p99(before) * 1000,
        after_p99_ms=p99(after) * 1000,
        loaded_p99_ms=p99(loaded) * 1000,
        loaded_p50_ms=sorted(s.latency for s in loaded)[len(loaded) // 2] * 1000,
        loaded_p99_ms_each_second=each_second(loaded, rate),
        unloaded_p99_ms_each_second=each_second(before, rate) + each_second(after, rate),
        enqueues=len(loaded),
        enqueue_failures=sum(s.status != 201 for s in before + loaded + after),
        failed_statuses=dict(
            Counter(
                f"{run} {s.status}"
                for run, samples in (("before", before), ("loaded", loaded), ("after", after))
                for s in samples
                if s.status != 201
            )
        ),
        probes=len(probes),
        probe_failures=sum(s.status != 200 for s in probes),
        slowest_probe_ms=max(s.latency for s in probes) * 1000,
        worker_cpu_unloaded=cpu_unloaded,
        worker_cpu_loaded=cpu_loaded,
        worker_pids=pids,
        worker_fds_before=fds_before,
        worker_fds_peak=fds_peak,
        worker_fds_after=fds_after,
        fresh_request_ms=fresh,
        attack=counts,
    )


def main() -> None:
    """Run the benchmark (or, with `attack`, the attacker alone) and print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", nargs="?", choices=["bench", "attack"], default="bench")
    parser.add_argument("--host", default="127.0.0.1", help="attack: the gateway's address")
    parser.add_argument("--port", type=int, help="attack: the gateway's port")
    parser.add_argument("--idle", type=int, default=5000)
    parser.add_argument("--trickle", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=200.0, help="enqueues per second")
    parser.add_argument(
        "--baseline", type=float, default=30.0, help="seconds unloaded, before and after"
    )
    parser.add_argument("--ready", type=Path, help="attack: file to touch once ramped up")
    parser.add_argument("--log", type=Path, help="keep gunicorn's log in this file")
    parser.add_argument(
        "--gthread",
        action="store_true",
        help="run gunicorn's own gthread worker, as the gateway did before gateway.http_worker",
    )
    args = parser.parse_args()
    raise_files_limit()
    if args.mode == "attack":
        counts = Attacker(args.host, args.port, args.idle, args.trickle).run(
            args.seconds, args.ready
        )
        print(json.dumps(asdict(counts)))
        return
    from tests.support.redis_server import private_redis  # a benchmark-only dependency

    flags = ["-k", "gthread", "--worker-connections", "1000"] if args.gthread else []

    with (
        tempfile.TemporaryDirectory(prefix="taskforge-abuse-") as tmp,
        private_redis() as redis_server,
        run_gunicorn(
            redis_server.url, Path(tmp), *flags, log_path=Path(tmp) / "gunicorn.log"
        ) as gw,
    ):
        report = abuse(
            gw, Path(tmp), args.idle, args.trickle, args.seconds, args.rate, args.baseline
        )
    print(json.dumps(asdict(report), indent=2))


if __name__ == "__main__":
    main()
