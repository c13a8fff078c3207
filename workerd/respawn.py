"""When the supervisor refills a dead child's slot: at once, after a back-off, or never (halt).

Bookkeeping only, no processes: the supervisor tells it of each exit and asks whether a slot
is due, so the crash-loop rules are one small object that tests can reason about.
"""

from __future__ import annotations

from workerd.children import WORKER, Child

BOOT_FAILURE_LIMIT = 5  # consecutive children dying before they are up → halt
# Respawn delays double from 0.1 s per quick death of a slot. A child that dies while booting
# waits up to 5 s (a crash loop; the halt above ends it). A child that was up and serving --
# killed by the OOM killer, an operator, or a handler that crashes the process -- waits at
# most 1 s: its job is already back in the queue, and an empty slot only slows the queue
# down. The poison pill that kills every worker it meets is bounded by the recovery cap.
RESPAWN_FIRST = 0.1
RESPAWN_CAP_BOOTING = 5.0
RESPAWN_CAP_UP = 1.0
QUICK_DEATH = 10.0  # seconds: a child that lived longer starts its slot's backoff afresh


class Halt(Exception):
    """The supervisor cannot run (children keep failing to boot); exit non-zero."""


class Respawns:
    """Per slot: when it may be refilled, and how many quick failures in a row it has seen."""

    def __init__(self) -> None:
        self.at: dict[int, float] = {}  # slot index -> monotonic time it may be refilled
        self.failures: dict[int, int] = {}
        self.boot_failures = 0  # children in a row, of any slot, that died while booting

    def due(self, index: int, now: float) -> bool:
        """Tell whether slot `index` may be refilled at `now`."""
        return now >= self.at.get(index, 0.0)

    def after_exit(self, child: Child, now: float, *, failed: bool, booting: bool) -> None:
        """Plan the refill of a dead child's slot; raise Halt after too many boot failures."""
        if booting:
            self.boot_failures += 1
            if self.boot_failures >= BOOT_FAILURE_LIMIT:
                raise Halt(
                    f"{self.boot_failures} children in a row died before they were up; "
                    "see the child_crashed lines above"
                )
        elif child.kind == WORKER:
            self.boot_failures = 0
        if now - child.started > QUICK_DEATH or not failed:
            self.failures[child.index] = 0
        failures = self.failures.get(child.index, 0) + (1 if failed else 0)
        self.failures[child.index] = failures
        cap = RESPAWN_CAP_BOOTING if booting else RESPAWN_CAP_UP
        delay = 0.0 if failures <= 1 else min(cap, RESPAWN_FIRST * 2 ** (failures - 2))
        self.at[child.index] = now + delay
