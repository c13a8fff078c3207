"""The totals of every queue, swept now and then and kept in Redis, so no request reads them all.

Reading every queue costs one script per queue (queue_stats.lua): at 10,000 queues /stats
took seconds (bench/many_queues.py). The overview, /stats and /metrics read every queue only
while the listed queues fit in one page (shared.read.queue_view); past that they show a bounded
set of queues read live, and the totals of all queues from this summary: one GET.

A sweep reads every listed queue's counts in pipelined chunks and writes the summary (the
totals, the busiest queues by pending + processing, when it ran and how long it took). It
runs only when someone asks for the totals and the summary is older than ``MAX_AGE_MS`` (or
``SPACING`` times the last sweep's duration), and only in the one process that takes the
lock (SET NX PX): with no one looking it costs nothing; with an overview tab or a scraper
open, one sweep per ``MAX_AGE_MS`` for the whole fleet. The sweep runs in a thread of the
gateway process (the request answers with the summary it has) or, where a process must not
start threads (workerd's children fork), in the caller.

On a cluster every chunk is one pipeline across masters (redis-py splits it by slot); the
summary and its lock live in the global slot like the list of queues.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis.exceptions

from shared.engine.queries import QueueCounts
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, wall_clock_ms

log = logging.getLogger(__name__)

# How stale the totals may get while someone looks. A sweep of 10,000 queues costs Redis
# about 0.8 s of CPU and the sweeping process about 1.5 s (3-4 s wall on a busy 2-core
# machine): sweeps are at least SPACING times their own duration apart, so sweeping takes
# at most 1/SPACING of one process's time, however many queues there are.
MAX_AGE_MS = 30_000
SPACING = 20
# Queues read per pipeline: a chunk's reply stays a few hundred kB.
CHUNK = 500
# The busiest queues a summary remembers (the overview shows some of them).
BUSIEST = 50
# The lock outlives any sweep (a dead sweeper's lock expires); the summary outlives many
# sweeps, so a stale one is still shown, with its age, while the next sweep runs.
LOCK_MS = 120_000
KEEP_MS = 86_400_000


@dataclass(frozen=True)
class Summary:
    """The totals of every listed queue as one sweep found them."""

    computed_at_ms: int  # when the sweep ended (this host's clock, ms)
    took_ms: int
    queues: int  # queues swept
    by_state: dict[JobState, int]
    oldest_pending_since_ms: int | None  # Redis clock; None: no pending job anywhere
    completed_last_minute: int
    failed_last_minute: int
    busiest: list[tuple[str, int]]  # (queue, pending + processing), most first

    def age_ms(self, now_ms: int | None = None) -> int:
        """Return how long ago the sweep ended."""
        return max(0, (now_ms if now_ms is not None else wall_clock_ms()) - self.computed_at_ms)

    def counts(self, now_ms: int | None = None) -> QueueCounts:
        """Return the totals as QueueCounts (the oldest pending age as of now)."""
        since = self.oldest_pending_since_ms
        now = now_ms if now_ms is not None else wall_clock_ms()
        return QueueCounts(
            dict(self.by_state),
            oldest_pending_age_ms=None if since is None else max(0, now - since),
            completed_last_minute=self.completed_last_minute,
            failed_last_minute=self.failed_last_minute,
        )

    def to_json(self) -> str:
        return json.dumps(
            {
                "computed_at_ms": self.computed_at_ms,
                "took_ms": self.took_ms,
                "queues": self.queues,
                "jobs": {str(state): n for state, n in self.by_state.items()},
                "oldest_pending_since_ms": self.oldest_pending_since_ms,
                "completed_last_minute": self.completed_last_minute,
                "failed_last_minute": self.failed_last_minute,
                "busiest": self.busiest,
            }
        )

    @classmethod
    def from_json(cls, raw: bytes | str) -> Summary | None:
        """Return the summary a sweep wrote, or None for anything else (then a sweep rewrites it)."""
        try:
            data = json.loads(raw)
            return cls(
                computed_at_ms=int(data["computed_at_ms"]),
                took_ms=int(data["took_ms"]),
                queues=int(data["queues"]),
                by_state={state: int(data["jobs"][str(state)]) for state in JobState},
                oldest_pending_since_ms=data["oldest_pending_since_ms"],
                completed_last_minute=int(data["completed_last_minute"]),
                failed_last_minute=int(data["failed_last_minute"]),
                busiest=[(str(name), int(n)) for name, n in data["busiest"]],
            )
        except (ValueError, KeyError, TypeError):
            return None


def busy(counts: QueueCounts) -> int:
    """Return what ranks a queue among the busiest: its pending and processing jobs."""
    return counts.by_state[JobState.PENDING] + counts.by_state[JobState.PROCESSING]


def read(scripts: Scripts) -> Summary | None:
    """Return the last sweep's summary (one GET), or None when there is none."""
    raw = scripts.redis.get(scripts.keys.summary)
    return Summary.from_json(raw) if raw else None


def sweep(scripts: Scripts, names: Sequence[str] | None = None, *, chunk: int = CHUNK) -> Summary:
    """Read every queue's counts, chunk by chunk, and write and return the summary."""
    started = wall_clock_ms()
    names = list(names) if names is not None else scripts.queue_names()
    by_state = dict.fromkeys(JobState, 0)
    oldest: int | None = None
    completed = failed = 0
    ranked: list[tuple[str, int]] = []
    for at in range(0, len(names), chunk):
        counts, _ = scripts.stats(names[at : at + chunk])
        for name, c in counts.by_queue.items():
            for state, n in c.by_state.items():
                by_state[state] += n
            if c.oldest_pending_age_ms is not None:
                since = wall_clock_ms() - c.oldest_pending_age_ms
                oldest = since if oldest is None else min(oldest, since)
            completed += c.completed_last_minute
            failed += c.failed_last_minute
            if busy(c):
                ranked.append((name, busy(c)))
        # Only the top few are kept: sorting each chunk's survivors keeps memory bounded.
        ranked = sorted(ranked, key=lambda item: (-item[1], item[0]))[:BUSIEST]
    ended = wall_clock_ms()
    summary = Summary(
        ended, ended - started, len(names), by_state, oldest, completed, failed, ranked
    )
    scripts.redis.set(scripts.keys.summary, summary.to_json(), px=KEEP_MS)
    log.info("queues_swept", extra={"queues": len(names), "took_ms": summary.took_ms})
    return summary


def current(
    scripts: Scripts,
    *,
    max_age_ms: int = MAX_AGE_MS,
    run: Callable[[Callable[[], object]], None] | None = None,
) -> Summary | None:
    """Return the summary, starting a sweep when it is missing or older than `max_age_ms`
    (or SPACING times the last sweep's duration, if longer).

    One GET, and one SET NX when the summary is stale. The process that takes the lock sweeps
    through `run` (default: a daemon thread, so the request answers with the summary it has;
    workerd passes in_place: its children fork, so no threads); with no summary yet, in place.
    The lock is released when the sweep ends. None: no summary, another process sweeps.
    """
    summary = read(scripts)
    if summary is not None and summary.age_ms() < max(max_age_ms, SPACING * summary.took_ms):
        return summary
    if not scripts.redis.set(scripts.keys.summary_lock, "1", nx=True, px=LOCK_MS):
        return summary  # another process sweeps now

    def job() -> None:
        try:
            sweep(scripts)
        except Exception:  # a thread's error is lost unless logged
            log.exception("queues_sweep_failed")
        finally:
            with contextlib.suppress(redis.exceptions.RedisError):  # else it expires
                scripts.redis.delete(scripts.keys.summary_lock)

    # With no summary at all there is nothing to answer meanwhile: this caller waits for the
    # sweep (once per KEEP_MS at most, after which every later request has totals to show).
    run = in_place if summary is None else run or in_thread
    run(job)
    return read(scripts) if run is in_place else summary


def in_thread(job: Callable[[], object]) -> None:
    """Run `job` in a daemon thread (the gateway's threads answer other requests meanwhile)."""
    threading.Thread(target=job, name="queues-sweep", daemon=True).start()


def in_place(job: Callable[[], object]) -> None:
    """Run `job` now, in the caller (for processes that must not start threads)."""
    job()
