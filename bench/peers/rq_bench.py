"""RQ: the no-op task, and its producer (run in var/bench-venvs/rq).

Workers: ``rq worker`` (fork a work horse per job) or ``rq worker -w rq.worker.SimpleWorker``
(no fork), each a separate process reading the queue ``bench``.
"""

from __future__ import annotations

from bench.peers.stamp import body, redis_url

QUEUE = "bench"


def noop(sent: float = 0.0) -> None:
    """The benchmark job: bench.peers.stamp.body (no-op, or I/O with BENCH_IO_WAIT_MS)."""
    body(sent)


def _queue():
    from redis import Redis
    from rq import Queue

    return Queue(QUEUE, connection=Redis.from_url(redis_url()))


def producer():
    """Return the producer functions bench.peers.runner calls: single, bulk, send."""
    from rq import Queue

    queue = _queue()

    def single(count: int) -> None:
        for _ in range(count):
            queue.enqueue(noop)

    def bulk(count: int) -> None:
        for start in range(0, count, 1000):
            batch = [Queue.prepare_data(noop) for _ in range(min(1000, count - start))]
            queue.enqueue_many(batch)

    return single, bulk, lambda sent: queue.enqueue(noop, sent)
