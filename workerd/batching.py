"""Batched claims and acknowledgements (WORKER_BATCH=N>1): a worker claims up to N jobs in one
call, runs them one by one, keeps the successful completions in memory and sends them in one
call (complete_batch.lua) that also claims the next batch, when the batch in hand is used up.

Each job still runs as one job: its slot shows it running (the supervisor renews its lease and
times it), and a failure or cancel is written at once, as ever. What a batch changes is when a
completion reaches Redis. Bounds (docs/WORKERD.md, "Batched claims and acknowledgements"):

- The completions waiting are sent at once, before anything else starts, when a job fails or
  is canceled, when the next job in hand is of a type not known short (workerd.prefetch's
  RunTimes: a type never seen is not short, so a type's first job runs with the completions
  before it written), when the oldest waiting completion is older than ACK_DELAY, and on stop,
  quiet, recycling and drain (then the unstarted jobs in hand go back uncounted, at once).
- No completion waits longer than ACK_DELAY, also while a job runs: then the worker's flusher
  thread sends them (workerd.ack_flusher).
- Unstarted jobs in hand past half the lease are handed back, not run (their leases are not
  renewed while they wait, as a held job's: workerd.prefetch); aged from the first send of the
  call that claimed them, right before each is taken from the hand.
- The duplicate window: a worker process that dies had up to N-1 jobs finished and not yet
  acknowledged (each within ACK_DELAY of its death) beside the one its slot showed running.
  release_worker.lua gives them back uncounted, as jobs never started, and they run again
  (docs/RELIABILITY.md).

Only on one Redis (or a Sentinel's master), without durable mode and with WORKER_THREADS=1
(shared.settings.config refuses threads with a batch): elsewhere the worker runs N=1, logged.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

from shared.connect.redis_conn import is_cluster
from shared.engine.scripts import Scripts
from shared.model.jobs import Job
from shared.settings.config import Settings
from workerd.prefetch import RunTimes

log = logging.getLogger(__name__)

# The longest a completion waits in memory before it is sent (seconds). Batching pays only for
# jobs of a few milliseconds or less (a round trip costs the worker about 0.25 ms of CPU), and
# a batch of 64 such jobs runs well within it; beyond it a completion shown late to clients and
# a longer duplicate window cost more than the round trip saves. A constant, not a setting:
# no deployment found a reason to tune it yet.
ACK_DELAY = 0.05


@dataclass
class Finished:
    """A job that ran successfully, its completion not yet sent."""

    job: Job
    result_json: str
    fields: dict[str, object]
    at: float  # monotonic, when it finished


@dataclass
class Batch:
    """One worker's batch: the jobs claimed and not yet started, and completions not yet sent."""

    size: int
    hand: deque[Job] = field(default_factory=deque)
    claimed_at: float = 0.0  # monotonic; the jobs in hand have held their leases since then
    done: list[Finished] = field(default_factory=list)

    def hold(self, jobs: tuple[Job, ...] | list[Job], sent_at: float) -> None:
        """Take claimed jobs in hand; `sent_at`: when the call that claimed them was first sent
        (their leases run from about then, however long its repeats took)."""
        # One claim's jobs at a time: all of one queue, aged from one send.
        assert not self.hand, "jobs still in hand"
        self.hand.extend(jobs)
        self.claimed_at = sent_at

    def must_send(self, run_times: RunTimes, now: float) -> bool:
        """Tell whether the waiting completions go now, before the next job in hand starts:
        none is in hand, or it is of a type not known short, or the oldest has waited ACK_DELAY."""
        if not self.done:
            return False
        if not self.hand or not run_times.short(self.hand[0].type):
            return True
        return now - self.done[0].at >= ACK_DELAY

    def held_too_long(self, hold_limit: float, now: float) -> bool:
        """Tell whether the jobs in hand have waited past `hold_limit` (half their lease)."""
        return bool(self.hand) and now - self.claimed_at > hold_limit

    def take_done(self) -> list[Finished]:
        done, self.done = self.done, []
        return done

    def deadline(self) -> float | None:
        """Return when the oldest waiting completion is due (None: none waits)."""
        return self.done[0].at + ACK_DELAY if self.done else None

    def take_hand(self) -> list[Job]:
        hand = list(self.hand)
        self.hand.clear()
        return hand


def by_queue(done: list[Finished], last: str) -> list[tuple[str, list[Finished]]]:
    """Group completions by their job's queue (one complete_batch call each: it takes one
    queue's), `last`'s group last (the call that may claim)."""
    groups: dict[str, list[Finished]] = {}
    for finished in done:
        groups.setdefault(finished.job.queue, []).append(finished)
    own = groups.pop(last, None)
    ordered = list(groups.items())
    if own is not None:
        ordered.append((last, own))
    return ordered


def batch_size(settings: Settings, scripts: Scripts, worker_id: str) -> int:
    """Return WORKER_BATCH, or 1 where batching does not run (durable mode, a Cluster), logged:
    the completions of a batch go in one bare EVALSHA, with no WAIT and no cluster routing."""
    size = settings.worker_batch
    if size <= 1:
        return 1
    reason = ""
    if scripts.policy.wait_replicas:
        reason = "durable mode (TASKFORGE_WAIT_REPLICAS)"
    elif is_cluster(scripts.redis):
        reason = "Redis Cluster"
    if reason:
        log.info(
            "worker_batch_off",
            extra={"worker_id": worker_id, "worker_batch": size, "reason": reason},
        )
        return 1
    return size
