"""Celery: the app, the no-op task and its producer (run in var/bench-venvs/celery).

Redis broker, no result backend (the task's result is ignored), prefetch multiplier 1;
``BENCH_CELERY_ACKS_LATE=1`` sets ``task_acks_late`` (acknowledge after the task ran).
Workers: ``celery -A bench.peers.celery_bench worker -P prefork -c N``.
"""

from __future__ import annotations

import os

from celery import Celery, group

from bench.peers.stamp import body, redis_url

app = Celery("bench", broker=redis_url())
app.conf.update(
    task_ignore_result=True,
    worker_prefetch_multiplier=1,
    task_acks_late=os.environ.get("BENCH_CELERY_ACKS_LATE") == "1",
    broker_connection_retry_on_startup=True,
)


@app.task(name="noop")
def noop(sent: float = 0.0) -> None:
    """The benchmark job: bench.peers.stamp.body (no-op, or I/O with BENCH_IO_WAIT_MS)."""
    body(sent)


def producer():
    """Return the producer functions bench.peers.runner calls: single, bulk, send."""

    def single(count: int) -> None:
        for _ in range(count):
            noop.delay()

    def bulk(count: int) -> None:
        # Celery has no bulk enqueue: a group publishes its messages one by one.
        for start in range(0, count, 1000):
            group(noop.s() for _ in range(min(1000, count - start))).apply_async()

    return single, bulk, lambda sent: noop.delay(sent)
