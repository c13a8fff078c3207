"""Dramatiq: the broker, the no-op actor and its producer (run in var/bench-venvs/dramatiq).

Redis broker, default middleware. Workers: ``dramatiq bench.peers.dramatiq_bench -p N -t T``.
"""

from __future__ import annotations

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from bench.peers.stamp import body, redis_url

broker = RedisBroker(url=redis_url())
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="bench")
def noop(sent: float = 0.0) -> None:
    """The benchmark job: bench.peers.stamp.body (no-op, or I/O with BENCH_IO_WAIT_MS)."""
    body(sent)


def producer():
    """Return the producer functions bench.peers.runner calls: single, bulk, send."""

    def single(count: int) -> None:
        for _ in range(count):
            noop.send()

    def bulk(count: int) -> None:
        # dramatiq.group(...).run() enqueues its messages one at a time: no bulk round trip.
        for start in range(0, count, 1000):
            dramatiq.group(noop.message() for _ in range(min(1000, count - start))).run()

    return single, bulk, lambda sent: noop.send(sent)
