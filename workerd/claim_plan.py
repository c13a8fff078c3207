"""Claim planning: which queue one claim slot asks next, which it skips and until when, and
how it waits when idle (docs/QUEUES.md).

Each claim walks the queues in the plan's order (strict, or drawn by weight), one claim call
per queue tried, since one script touches one queue's slot. A queue found empty is skipped for
`empty_recheck`, so a worker busy on a lower queue does not ask an empty higher one before
every job; a paused queue leaves the order and the wake lists until a re-check (one pipelined
EXISTS every `paused_recheck`) finds it resumed; on a Redis Cluster a queue whose master does
not answer is set aside for `cluster_set_aside` while the others flow; a queue whose first job
another host runs is left to it (workerd.routing).

No Redis here and no sleeping: the caller reads Redis and sleeps, this object decides, on the
clock it is given, so tests step it by hand. One planner per claim slot: it holds nothing
shared by the process.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from shared.model.queues import QueuePlan
from shared.obs.log import error_text
from workerd.routing import Routing

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimTimings:
    """How long a worker skips, waits and re-checks (seconds, except where said)."""

    # An idle worker blocks on its wake lists this long per wait (one BLPOP a second).
    wake_timeout: float = 1.0
    # A busy worker skips a queue that answered "empty" this long: at most this much later does
    # a job newly enqueued to a higher queue overtake the lower queue it is working through
    # (idle workers are woken for it at once).
    empty_recheck: float = 0.2
    # A queue found paused is asked again (one EXISTS, pipelined over every paused queue) this
    # often: how long after a resume a worker that dropped it takes from it again.
    paused_recheck: float = 1.0
    # A quiet worker reads its flag (shared memory, no Redis) this often: how long after a
    # resume (SIGCONT, or the API's request applied) it claims again.
    quiet_wait: float = 0.2
    # An idle worker claims without a hint every this many empty waits (a count): a safety net
    # should a hint ever be lost (popped by a worker that died before claiming). A worker
    # waiting on one queue claims behind every wait instead (workerd.worker, but for
    # WORKER_BATCH and a cluster).
    claim_anyway_every: int = 10
    # On a Redis Cluster, a queue whose master does not answer is set aside this long while the
    # worker serves its other queues: a failover takes cluster-node-timeout and more.
    cluster_set_aside: float = 0.5
    # On a Redis Cluster an idle worker blocks on one queue's wake list at a time, this long: a
    # job in another of its queues waits at most this for it.
    cluster_wake_slice: float = 0.25


@dataclass(frozen=True)
class IdleWait:
    """How an idle worker waits: block on `queues`' wake lists, or (none) sleep `sleep`."""

    queues: tuple[str, ...]
    sleep: float = 0.0
    claim_after: bool = False  # after sleeping: claim at once (a left queue is due again)


class ClaimPlanner:
    """One claim slot's choice of queue, its skip lists, and its idle waiting."""

    def __init__(
        self,
        plan: QueuePlan,
        routing: Routing,
        *,
        clock: Callable[[], float] = time.monotonic,
        timings: ClaimTimings | None = None,
        first_turn: int = 0,
        rng: random.Random | None = None,
    ) -> None:
        self.plan = plan
        self.rng = rng  # draws weighted orders; None: the module's
        self.routing = routing
        self.clock = clock
        self.timings = timings or ClaimTimings()
        self.claim_now = True  # the next step claims; False: it waits for a hint first
        self.order: tuple[str, ...] = ()  # the queue order drawn for the next claim
        self.empty_until: dict[str, float] = {}  # queue -> when to ask it again
        # On a cluster, queues whose master did not answer: skipped until then.
        self.unreachable_until: dict[str, float] = {}
        self.paused: set[str] = set()  # queues that answered PAUSED, re-checked
        self.paused_checked = 0.0  # when they were last asked
        # Claims that raised, queue -> request id: each may have reached Redis (only its reply
        # was lost), so the next claim on that queue repeats it and gets that job back.
        self.claim_retry: dict[str, str] = {}
        self.idle_waits = 0
        # Which wake list a cluster's idle worker blocks on next: workers start apart.
        self.wake_turn = first_turn

    # --- the order of one claim ------------------------------------------------------------

    def next_order(self) -> tuple[str, ...]:
        """Return the queues to try next, in order, without those skipped just now."""
        if not self.order:
            now = self.clock()
            self.order = tuple(
                q
                for q in self.plan.order(self.rng)
                if self.empty_until.get(q, 0.0) <= now
                and self.unreachable_until.get(q, 0.0) <= now
                and q not in self.paused
                and not self.routing.leaves(q, now)
            )
        order, self.order = self.order, ()
        return order

    def retries(self) -> Iterator[tuple[str, str]]:
        """Yield the claims to repeat first (queue, request id), on reachable queues only."""
        for queue, request_id in list(self.claim_retry.items()):
            if self.reachable(queue):
                yield queue, request_id

    def found_empty(self, queue: str) -> None:
        """Skip `queue` for `empty_recheck`: it answered that it has no job."""
        self.empty_until[queue] = self.clock() + self.timings.empty_recheck

    # --- the claim that rides on a completion ----------------------------------------------

    def complete_claims_from(self, queue: str) -> bool:
        """Draw the next claim's order; tell whether `queue` comes first in it.

        Only then may the completion of a job of `queue` claim the next job in the same call.
        The order is kept for the next claim either way.
        """
        self.order = self.next_order()
        return bool(self.order) and self.order[0] == queue

    def completed(self, queue: str, *, claimed_next: bool) -> None:
        """Record what a completion that asked `queue` for its next job got."""
        if claimed_next:
            # The order drawn for this claim is spent. Kept, it would be the next one too: the
            # worker would stay on this queue until it ran dry (no weights, and a higher
            # queue's new job waiting behind the whole lower queue).
            self.order = ()
            return
        # Asked its queue for the next job and got none: the rest of the order, if any.
        self.found_empty(queue)
        self.order = self.order[1:]
        self.claim_now = bool(self.order)

    # --- paused queues ---------------------------------------------------------------------

    def found_paused(self, queue: str) -> None:
        """Stop asking a paused queue (claims and wake lists) until a re-check finds it resumed."""
        if not self.paused:
            self.paused_checked = self.clock()
        self.paused.add(queue)

    def paused_to_recheck(self) -> list[str]:
        """Return the paused queues to ask about now (sorted); [] until the re-check is due."""
        now = self.clock()
        if not self.paused or now < self.paused_checked + self.timings.paused_recheck:
            return []
        self.paused_checked = now
        return sorted(self.paused)

    def resumed(self, queue: str) -> None:
        """Serve `queue` again, at once: a re-check found it resumed."""
        self.paused.discard(queue)
        self.empty_until.pop(queue, None)
        self.claim_now = True

    # --- a cluster's masters ---------------------------------------------------------------

    def reachable(self, queue: str) -> bool:
        """Tell whether `queue` is not set aside for its master's failure (a cluster's)."""
        return self.unreachable_until.get(queue, 0.0) <= self.clock()

    def set_aside(self, queue: str, exc: Exception) -> None:
        """Set a queue aside whose master failed (a cluster's): the others keep flowing.

        On one Redis an error stops every queue and the step backs off. On a cluster one
        master's death (until its replica is promoted) must not stall the queues of the
        others: this queue is skipped for `cluster_set_aside`. Raises `exc` when no queue is
        left to serve, so the step backs off as on one Redis.
        """
        retry_s = self.timings.cluster_set_aside
        if self.reachable(queue):
            log.warning(
                "queue_unreachable",
                extra={"queue": queue, "error": error_text(exc), "retry_s": retry_s},
            )
        self.unreachable_until[queue] = self.clock() + retry_s
        if not any(self.reachable(q) for q in self.plan.names):
            raise exc

    # --- idle waiting ----------------------------------------------------------------------

    def idle_wait(self) -> IdleWait:
        """Say how to wait for work: the wake lists to block on, or how long to sleep.

        Not a paused queue's lists (enqueues there would wake the worker for nothing), nor
        those of a queue left to other hosts (its hints are for them). With every queue paused
        there is nothing to block on: it waits as long without Redis.
        """
        now = self.clock()
        queues = tuple(
            q
            for q in self.plan.names
            if q not in self.paused
            and not self.routing.leaves(q, now)
            and self.unreachable_until.get(q, 0.0) <= now
        )
        if queues:
            return IdleWait(queues)
        timeout = self.timings.wake_timeout
        if all(q in self.paused for q in self.plan.names):
            return IdleWait((), sleep=timeout)
        # Every queue not paused starts with another host's job: no hint is ours until the
        # first of them is due for another claim.
        until_back = max(0.0, self.routing.back_at() - now)
        return IdleWait((), sleep=min(timeout, until_back), claim_after=True)

    def cluster_turn(self, queues: tuple[str, ...]) -> str:
        """Return the queue whose wake list a cluster's idle worker blocks on this time."""
        self.wake_turn = (self.wake_turn + 1) % len(queues)
        return queues[self.wake_turn]

    def hinted(self, queue: str) -> None:
        """Ask `queue` at the next claim even if found empty just now: a hint says it has work."""
        self.empty_until.pop(queue, None)

    def waited(self, hinted: str | None) -> bool:
        """Record one idle wait and what woke it (a queue's hint, or None); return whether to
        claim now: on a hint, or every `claim_anyway_every` waits without one."""
        self.idle_waits += 1
        if hinted is not None:
            self.hinted(hinted)
            return True
        if self.idle_waits % self.timings.claim_anyway_every == 0:
            self.empty_until.clear()
            return True
        return False
