"""Completions and failed executions per minute over the last hour, in all or per queue.

The dashboard's overview chart. Counting costs the hot path nothing: trim.lua, which the
scheduler runs every second for each busy queue, rolls the completed index and the
per-second failure counts into per-minute buckets (``Keys.throughput``) before it forgets
them; throughput.lua reads the buckets and adds what finished after trim's watermark, live,
so the current minute is right without waiting for the next trim. One pipelined round trip
for the queues asked for.

All queues (``queues_counted``): every listed queue while they fit in a page; past that,
since anyone can list a queue, the queues hosts serve (Keys.served): only a worker completes
or fails a job, so those hold every completion and failure, and their number is the
configuration's, not the number of names.

What it counts: a completion once, in the minute of its finish time; a failed execution
(retried or dead) once, in the minute it failed; not a job lost with its worker. The minutes
are Redis's clock, whole epoch minutes (UTC), so the oldest of 60 points is partly before the
hour and the newest is the minute in progress.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shared.engine.scripts import Scripts
from shared.read.queue_view import names_within, served

MINUTE_MS = 60_000
MAX_MINUTES = 60
# While the listed queues are at most this many, "all queues" reads each of them.
EVERY_QUEUE_CAP = 100


@dataclass(frozen=True)
class Minute:
    """One minute of the chart: when it starts (epoch ms), what completed and failed in it."""

    start_ms: int
    completed: int
    failed: int


def queues_counted(scripts: Scripts) -> tuple[list[str], bool]:
    """Return the queues the throughput of all queues reads, and whether they are every
    listed queue (else the served ones): two round trips at most."""
    return names_within(
        scripts, limit=EVERY_QUEUE_CAP, first=lambda: served(scripts), busiest=False
    )


def last_hour(
    scripts: Scripts,
    queues: Sequence[str],
    now_ms: int | None = None,
    *,
    minutes: int = MAX_MINUTES,
) -> list[Minute]:
    """Return the last `minutes` minutes (oldest first, the current one last), summed over
    `queues`. Raises ValueError for `minutes` outside 1 to 60."""
    if not 1 <= minutes <= MAX_MINUTES:
        raise ValueError(f"minutes must be from 1 to {MAX_MINUTES}, got {minutes}")

    def pipeline() -> Any:
        pipe = scripts.redis.pipeline(transaction=False)
        for queue in queues:
            scripts.throughput(pipe, queue=queue, minutes=minutes, now_ms=now_ms)
        return pipe

    replies = scripts.execute_loaded(pipeline) if queues else []  # reads: repeatable
    completed: dict[int, int] = {}
    failed: dict[int, int] = {}
    # Each queue's call reads Redis's clock on its own: a minute may turn between two of them,
    # so sum by minute and answer the window that ends at the latest.
    last = None
    for _, first, per_minute_completed, per_minute_failed in replies:
        for offset, (done, lost) in enumerate(
            zip(per_minute_completed, per_minute_failed, strict=True)
        ):
            minute = int(first) + offset
            completed[minute] = completed.get(minute, 0) + int(done)
            failed[minute] = failed.get(minute, 0) + int(lost)
        last = max(last or 0, int(first) + minutes - 1)
    if last is None:
        last = _minute_now(scripts, now_ms)
    return [
        Minute(m * MINUTE_MS, completed.get(m, 0), failed.get(m, 0))
        for m in range(last - minutes + 1, last + 1)
    ]


def _minute_now(scripts: Scripts, now_ms: int | None) -> int:
    """Return the current epoch minute on Redis's clock (no queue to read it from)."""
    if now_ms is None:
        seconds, micros = scripts.redis.time()
        now_ms = seconds * 1000 + micros // 1000
    return now_ms // MINUTE_MS
