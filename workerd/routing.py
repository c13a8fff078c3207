"""Routing: a worker takes only the job types its host runs (docs/QUEUES.md, "Routing").

Every claim names the types this host has handlers for; the claim scripts leave a job of
another type first in its queue and answer its type (shared.engine.engine_types.NotRunnable). The
worker then asks the fleet registry whether a live host that serves the queue runs that type:

- one does: the worker leaves the queue alone for LEAVE_FOR seconds, so that host takes the
  job. The job stays first in line, so nothing behind it is claimed here meanwhile (head of
  line): give types that only some hosts run a queue of their own;
- none does: the worker takes the type for TAKE_FOR seconds (its claims on that queue name it
  as runnable) and the job fails as NoHandler, as it did before routing: a job of a mistyped
  type must not block its queue.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from shared.engine.engine_types import NotRunnable

log = logging.getLogger(__name__)

# A worker leaves a queue whose first job another host runs this long, like `empty_recheck` in
# workerd.claim_plan but longer: the other host needs a claim of its own to take the job.
LEAVE_FOR = 2.0
# A type no live host runs is taken (to fail) this long before the registry is asked again:
# its heartbeat interval, within which a host that starts running the type is listed.
TAKE_FOR = 2.0
# Each decision is logged once per queue and type this often at most.
LOG_EVERY = 60.0


class Routing:
    """One worker's routing state: its host's types, the queues it leaves, the types it takes."""

    def __init__(
        self,
        own: Iterable[str],
        hosts_running: Callable[[str, str], list[str]],
        *,
        worker_id: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.own = frozenset(own)
        self.hosts_running = hosts_running  # (queue, type) -> live hosts serving it that run it
        self.worker_id = worker_id
        self.clock = clock
        self.left_until: dict[str, float] = {}  # queue -> when to claim from it again
        self.taken: dict[str, dict[str, float]] = {}  # queue -> {type no host runs: until}
        self.logged: dict[tuple[str, str, str], float] = {}  # (event, queue, type) -> logged at

    def runnable(self, queue: str) -> frozenset[str]:
        """Return the types a claim on `queue` takes: the host's, and those no host runs."""
        taken = self.taken.get(queue)
        if not taken:
            return self.own
        now = self.clock()
        for job_type in [t for t, until in taken.items() if until <= now]:
            del taken[job_type]
        return self.own.union(taken) if taken else self.own

    def leaves(self, queue: str, now: float) -> bool:
        """Tell whether the worker leaves `queue` to other hosts at `now` (monotonic)."""
        return self.left_until.get(queue, 0.0) > now

    def back_at(self) -> float:
        """Return when the first queue left to other hosts is due for another claim."""
        return min(self.left_until.values(), default=self.clock())

    def take(self, refusal: NotRunnable) -> bool:
        """Decide about a job a claim left in place; return whether to claim it after all.

        True when no live host serving its queue runs its type (it will fail as NoHandler);
        False when one does: the queue is then left to it for LEAVE_FOR seconds.
        """
        queue, job_type = refusal.queue, refusal.job_type
        hosts = self.hosts_running(queue, job_type)
        now = self.clock()
        if hosts:
            self.left_until[queue] = now + LEAVE_FOR
            self._say(now, refusal, "left_for_other_hosts", logging.INFO, hosts=hosts)
            return False
        self.taken.setdefault(queue, {})[job_type] = now + TAKE_FOR
        self._say(now, refusal, "no_host_runs_type", logging.WARNING)
        return True

    def _say(
        self, now: float, refusal: NotRunnable, event: str, level: int, **fields: object
    ) -> None:
        key = (event, refusal.queue, refusal.job_type)
        last = self.logged.get(key)
        if last is not None and now - last < LOG_EVERY:
            return
        self.logged[key] = now
        extra = {"queue": refusal.queue, "type": refusal.job_type, "worker_id": self.worker_id}
        log.log(level, event, extra={**extra, **fields})
