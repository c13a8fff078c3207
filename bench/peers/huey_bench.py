"""Huey: the RedisHuey instance, the no-op task and its producer (var/bench-venvs/huey).

Workers: ``huey_consumer bench.peers.huey_bench.huey -k process -w N``. Huey has no bulk
enqueue API.
"""

from __future__ import annotations

from huey import RedisHuey

from bench.peers.stamp import body, redis_url

huey = RedisHuey("bench", url=redis_url())


@huey.task()
def noop(sent: float = 0.0) -> None:
    """The benchmark job: bench.peers.stamp.body (no-op, or I/O with BENCH_IO_WAIT_MS)."""
    body(sent)


def producer():
    """Return the producer functions bench.peers.runner calls: single, bulk, send."""

    def single(count: int) -> None:
        for _ in range(count):
            noop()

    return single, None, lambda sent: noop(sent)
