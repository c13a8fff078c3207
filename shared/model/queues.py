"""Named queues: the name rule, and the order in which a worker serves its queues.

A queue is a name jobs are enqueued under; each has its own indexes under its own Redis Cluster
hash tag (shared.engine.keys), so one script never touches two queues. ``WORKER_QUEUES`` says which
queues a workerd host serves and how, in Sidekiq's two forms:

- strict, ``critical,default,low``: always the first queue that has a claimable job;
- weighted, ``critical:6,default:3,low:1``: each claim draws the queue order at random, a
  queue first in proportion to its weight, so a low queue is never starved.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

DEFAULT_QUEUE = "default"
# No ':' '{' '}' or spaces: a queue name sits inside a hash tag and a key, and in a URL path.
QUEUE_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
QUEUE_RULE = "must be 1-64 characters of A-Z a-z 0-9 _ . -"
WEIGHT_LIMIT = 1000


def is_queue_name(name: object) -> bool:
    """Tell whether `name` may name a queue."""
    return isinstance(name, str) and QUEUE_PATTERN.fullmatch(name) is not None


@dataclass(frozen=True)
class QueuePlan:
    """The queues one workerd host serves, and whether by strict order or by weight."""

    names: tuple[str, ...]
    weights: tuple[int, ...] | None = None  # None: strict order

    @property
    def weighted(self) -> bool:
        return self.weights is not None

    def order(self, rng: random.Random | None = None) -> tuple[str, ...]:
        """Return the queues in the order to try for the next claim.

        Weighted: a draw without replacement, each next queue picked in proportion to its
        weight among those left (Sidekiq's weighted fetch), so over many claims each busy
        queue comes first about weight / total of the time.
        """
        if self.weights is None or len(self.names) == 1:
            return self.names
        rng = rng or random
        # Efraimidis–Spirakis: sort by u^(1/w), one draw per queue.
        keyed = sorted(
            zip(self.names, self.weights, strict=True),
            key=lambda pair: rng.random() ** (1.0 / pair[1]),
            reverse=True,
        )
        return tuple(name for name, _ in keyed)

    def describe(self) -> str:
        """Return the plan as WORKER_QUEUES would write it."""
        if self.weights is None:
            return ",".join(self.names)
        return ",".join(f"{n}:{w}" for n, w in zip(self.names, self.weights, strict=True))


def parse_worker_queues(text: str) -> QueuePlan:
    """Parse WORKER_QUEUES: ``a,b,c`` (strict order) or ``a:6,b:3,c:1`` (weighted)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise ValueError("at least one queue name, e.g. default or critical,default,low")
    names: list[str] = []
    weights: list[int] = []
    for item in items:
        name, colon, weight = item.partition(":")
        if not is_queue_name(name):
            raise ValueError(
                f"queue names that are {QUEUE_RULE.removeprefix('must be ')}, not {name!r}"
            )
        if name in names:
            raise ValueError(f"each queue once, but {name!r} is listed twice")
        names.append(name)
        if colon:
            if not weight.isdigit() or not 1 <= int(weight) <= WEIGHT_LIMIT:
                raise ValueError(f"a weight of a whole number 1-{WEIGHT_LIMIT} for {name!r}")
            weights.append(int(weight))
    if weights and len(weights) != len(names):
        raise ValueError("every queue with a weight (a:6,b:3,c:1) or none (a,b,c), not a mix")
    return QueuePlan(tuple(names), tuple(weights) if weights else None)
