"""The scheduler's v1 duty: while jobs are left under layout v1, move them into v2.

During a rolling upgrade an old gateway may still enqueue under ``{taskforge}:v1:`` after
``python -m shared.upgrade`` ran, and an old worker may still finish a job there: without this
duty those jobs would wait for someone to run the command again. Every CHECK_INTERVAL one
EXISTS asks whether any v1 index (or the upgrade's staging area) is there; while one is, each
tick moves up to MAX_JOBS jobs and walks the v1 keys a few SCAN calls further for the
idempotency keys of the jobs moved. Schedulers on several hosts may do this at once: every step
re-checks in Redis (shared.upgrade). Logs counts, never a job's data.
"""

from __future__ import annotations

import logging

import redis

from shared.log import error_text
from shared.upgrade import BATCH, Moved, Upgrade

log = logging.getLogger(__name__)

CHECK_INTERVAL = 5.0  # seconds between EXISTS checks while v1 holds nothing
# Jobs moved per tick, about 50 ms of work (docs/QUEUES.md): the same process promotes due jobs,
# and a tick delays that by as much, once a second, only while v1 holds jobs. 200 a second
# outruns what old gateways enqueue in most deployments; a backlog is the command's to move.
MAX_JOBS = 200
SCANS = 5  # SCAN calls per tick, while a walk for idempotency keys is under way
FAILED_PAUSE = 60.0  # after a script error: a bug to fix, not a reason to stop scheduling


class V1Drain:
    """Moves v1's jobs and then their idempotency keys, a bounded amount per tick."""

    def __init__(self, upgrade: Upgrade) -> None:
        self.upgrade = upgrade
        self.next_check = 0.0
        self.cursor: int | None = None  # a walk of the v1 keys under way
        self.walk_again = False  # jobs moved since the walk under way began
        self.moving = False  # jobs were found: say so once v1 is drained

    def tick(self, now: float, now_ms: int | None = None) -> None:
        """Check (or go on moving) when due; a connection error is the caller's to back off."""
        if now < self.next_check:
            return
        self.next_check = now + CHECK_INTERVAL
        try:
            self._step(now, now_ms)
        except redis.ResponseError as exc:
            log.error("v1_drain_failed", extra={"error": error_text(exc)})
            self.next_check = now + FAILED_PAUSE

    def _step(self, now: float, now_ms: int | None) -> None:
        moved = Moved()
        if self.upgrade.v1_holds_jobs():
            while moved.total + moved.dangling < MAX_JOBS:
                step = self.upgrade.move_jobs(min(BATCH, MAX_JOBS), now_ms=now_ms)
                moved.add(step)
                if not step.progressed:
                    break
            self.moving = True
            if moved.progressed:
                self.walk_again = True
                self.next_check = now  # more may be left: the caller's next tick goes on
        elif self.cursor is None and not self.walk_again:
            if self.moving:
                log.info("v1_drained")
                self.moving = False
            return
        self._walk(moved)
        if self.cursor is not None:
            self.next_check = now  # the walk goes on at the caller's next tick
        if moved.total or moved.keys or moved.dangling:
            log.info("v1_jobs_moved", extra=moved.fields())

    def _walk(self, moved: Moved) -> None:
        """Go on walking the v1 keys for idempotency keys, SCANS calls at most."""
        if self.cursor is None:
            if not self.walk_again:
                return
            self.cursor, self.walk_again = 0, False
        for _ in range(SCANS):
            self.cursor, _, names = self.upgrade.scan(self.cursor)
            if names:
                moved.keys.update(self.upgrade.move_keys(names))
            if self.cursor == 0:
                self.cursor = None
                return
