"""What each piece of a worker's per-job bookkeeping costs: CPU µs per call, and per job.

Each piece is timed alone in a loop (CPU time, best of 3), in this checkout's code, as a
worker runs it: metrics in multiprocess mode (their own temporary directory), logging
configured as workerd configures it (JSON lines, here to /dev/null), tracing off. The per-job
column multiplies by how often a trivial job runs the piece (tests/workerd/test_job_budget.py
keeps those counts). bench.job_cpu measures the whole worker; this says where it goes.

    .venv/bin/python -m bench.job_parts
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from shared.obs.multiproc import MULTIPROC_ENV

JOB_ID = "d3efa2b0-87fd-40a9-9b68-164f5cee5887"


def best_us(call: Callable[[], object], count: int) -> float:
    """Return the least CPU µs per call of `call` over three loops of `count` calls."""
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        for _ in range(count):
            call()
        best = min(best, (time.process_time() - started) / count * 1e6)
    return best


def pieces() -> list[tuple[str, float, Callable[[], object]]]:
    """Return (what, times per trivial job, the call) for each piece of bookkeeping."""
    # Imported here: prometheus_client picks its storage at import, after MULTIPROC_ENV is set.
    from shared.engine import lifecycle
    from shared.obs import metrics, tracing
    from shared.obs.log import configure
    from workerd.ack_flusher import AckFlusher
    from workerd.slots import SlotTable

    configure("workerd")
    slot = SlotTable(1).slot(0)

    def outcome(which: lifecycle.Outcome) -> Callable[[], None]:
        fields = {"worker_id": "vm-1234-worker0-1", "priority": 0, "queue_wait_ms": 3}
        job = (JOB_ID, "demo.noop")
        return lambda: lifecycle.record(which, *job, queue="default", attempt=1, **fields)

    info_line, debug_claim = outcome(lifecycle.Outcome.STARTED), outcome(lifecycle.Outcome.CLAIMED)

    def span_off() -> None:
        with tracing.span("task.execute", None, None):
            pass

    # A held job arms the flusher with its READ_LATE deadline and disarms it when it ends
    # (workerd.prefetch); its thread sleeps toward a deadline far off, as in a backlog.
    flusher = AckFlusher(lambda: None, time.monotonic)

    def arm_and_disarm() -> None:
        flusher.arm(time.monotonic() + 3600)
        flusher.disarm()

    return [
        ("an INFO line (job_started, job_completed)", 2, info_line),
        ("a DEBUG outcome at INFO: job_claimed, its counter", 1, debug_claim),
        ("a lifecycle counter (completed)", 1, lambda: metrics.count("completed", "demo.noop", "default")),
        ("a histogram observation (handler time, queue wait)", 2, lambda: metrics.observe_handler("demo.noop", "default", 0.001)),
        ("a livesum gauge set (taskforge_busy_workers was 2 a job)", 0, lambda: metrics.ACTIVE_WORKERS.set(1)),
        ("a span with tracing off (execute, acknowledge)", 2, span_off),
        ("tracing.enabled()", 3, tracing.enabled),
        ("a slot write (start, handler returned, end, next step)", 4, lambda: slot.start_job(JOB_ID, 7, 30.0)),
        ("the flusher armed and disarmed (a held job)", 1, arm_and_disarm),
    ]  # fmt: skip


def main() -> None:
    """Time each piece and print µs per call and per job."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=50_000, help="calls per timed loop")
    args = parser.parse_args()
    if not os.environ.get(MULTIPROC_ENV):
        with tempfile.TemporaryDirectory(prefix="taskforge-bench-parts-") as tmp:
            env = {**os.environ, MULTIPROC_ENV: tmp}
            argv = [sys.executable, "-m", "bench.job_parts", *sys.argv[1:]]
            sys.exit(subprocess.call(argv, env=env))
    out = sys.stdout
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (the log lines' stream, for the run)
    rows = [(what, per_job, best_us(call, args.count)) for what, per_job, call in pieces()]
    logging.shutdown()
    print(f"{'piece':58} {'µs/call':>8} {'a job':>6} {'µs/job':>7}", file=out)
    for what, per_job, us in rows:
        print(f"{what:58} {us:8.2f} {per_job:6g} {us * per_job:7.2f}", file=out)
    total = sum(us * per_job for _, per_job, us in rows)
    print(f"{'total per job':58} {'':8} {'':6} {total:7.2f}", file=out)
    print("\nfor scale, the round trip each job makes (not bookkeeping):", file=out)
    for what, us in round_trip(args.count // 5):
        print(f"{what:58} {us:8.2f}", file=out)


def round_trip(count: int) -> list[tuple[str, float]]:
    """Return the client CPU of a bare round trip (raw socket, redis-py) and of packing a call
    shaped like complete + claim next (EVALSHA, 13 keys, 13 arguments), by redis-py's own
    packer and by the one our connections use (shared.connect.command_packer)."""
    import redis
    from redis.connection import Connection

    from shared.connect.redis_conn import PACKER
    from tests.support.redis_server import private_redis

    call = ["EVALSHA", "f" * 40, 13, *(f"{{q:default}}:key{i}" for i in range(13))]
    call += [f"argument{i}" for i in range(12)] + [1733486400000]
    with private_redis() as server:
        client = redis.Redis.from_url(server.url)
        client.ping()
        sock = client.connection_pool.get_connection()._sock

        def raw_ping() -> None:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            sock.recv(64)

        raw = best_us(raw_ping, count)
    with private_redis() as server:
        through_redis_py = best_us(redis.Redis.from_url(server.url).ping, count)
    with private_redis() as server:
        through_pool, kept = worker_call(server.url, count)
    connection = Connection()  # never connected: packing only
    pack = best_us(lambda: connection.pack_command(*call), count)
    ours = best_us(lambda: PACKER.pack(*call), count)
    return [
        ("PING on a raw socket: send, receive", raw),
        ("PING through redis-py", through_redis_py),
        ("a worker's call (13 keys, 10 arguments), pool each call", through_pool),
        ("the same on the thread's kept connection (as workers send)", kept),
        ("redis-py's own packing of 29 arguments (str and int)", pack),
        ("the same, as our connections pack it (CommandPacker)", ours),
    ]


def worker_call(url: str, count: int) -> tuple[float, float]:
    """Return the client CPU of one call sent now and read later, shaped like complete + claim
    next (its reply a 14-value list): with a connection taken from redis-py's pool and given
    back around each (workers before bench/PER_JOB_COST.md's "The worker's connection"), and
    as ScriptTransport.begin sends it, on the thread's kept connection."""
    import redis

    from shared.engine.engine_types import Policy
    from shared.engine.scripts.script_transport import ScriptTransport

    header = "".join(f"-- KEYS[{i}] -> k{i}: key\n" for i in range(1, 14))
    header += "".join(f"-- ARGV[{i}] -> a{i}: argument\n" for i in range(1, 11))
    transport = ScriptTransport(
        redis.Redis.from_url(url),
        {"call": header + "return {1,2,3,4,5,6,7,8,9,10,11,12,13,14}"},
        Policy(),
        durable_marker="",
    )
    transport.load()
    named = {f"k{i}": f"{{q:default}}:key{i}" for i in range(1, 14)}
    named.update({f"a{i}": f"argument{i}" for i in range(1, 11)})
    keys, args = transport.signatures["call"].bind(named)
    sha, pool = transport.shas["call"], transport.redis.connection_pool

    def through_pool() -> None:
        conn = pool.get_connection()
        conn.send_command("EVALSHA", sha, len(keys), *keys, *args)
        conn.read_response()
        pool.release(conn)

    return best_us(through_pool, count), best_us(
        lambda: transport.begin("call", **named).reply(), count
    )


if __name__ == "__main__":
    main()
