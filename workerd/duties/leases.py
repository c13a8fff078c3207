"""Lease renewal: the supervisor extends the lease of every job its workers run.

One call per interval renews them all, so a handler stuck in one long C call keeps its lease
while its process lives; a worker whose lease was lost (its job recovered and claimed anew)
is killed before it can write over the new holder's work. A job asked to stop (renew.lua's
CANCEL_ASKED) is handed to workerd.duties.cancels, which stops its worker.
"""

from __future__ import annotations

import logging

import redis

from shared.connect.redis_conn import is_cluster
from shared.engine.engine_types import Code
from shared.engine.scripts import Scripts
from shared.model.queues import DEFAULT_QUEUE
from shared.obs.log import error_text
from workerd.children import WORKER, Child, Roster
from workerd.duties.cancels import Cancels

log = logging.getLogger(__name__)


class Leases:
    """Renews the leases of the running jobs every `interval` seconds."""

    def __init__(
        self,
        roster: Roster,
        scripts: Scripts,
        *,
        interval: float,
        redis_url: str,
        cancels: Cancels | None = None,
    ) -> None:
        self.roster = roster
        self.scripts = scripts
        self.cancels = cancels
        self.interval = interval
        self.redis_url = redis_url  # redacted: it names the server in the failure line
        self.next_renew = 0.0

    def tick(self, now: float) -> None:
        """Renew when due; kill the workers whose lease Redis says was lost."""
        if now < self.next_renew:
            return
        self.next_renew = now + self.interval
        running = self._running()
        if not running:
            return
        codes, error = self._renew(running)
        if error is not None:
            # The next tick tries again; a lease outlives several missed renewals.
            log.warning(
                "lease_renewal_failed",
                extra={
                    "redis": self.redis_url,
                    "error": error_text(error),
                    "jobs": len(running) - len(codes),
                },
            )
        for child, index, job_id, _, _ in running:
            code = codes.get(job_id)  # None: not renewed this time
            if code in (Code.STALE_TOKEN, Code.NOT_FOUND):
                log.error("lease_lost", extra={"job_id": job_id, "child": child.name})
                self.roster.kill(child, "lease lost", culprit=index)
            elif code is Code.CANCEL_ASKED and self.cancels is not None:
                state = self.roster.table.slot(index).read()
                if state is not None and state.job_id == job_id:
                    self.cancels.request(child, index, state, now)

    def _renew(
        self, running: list[tuple[Child, int, str, int, str]]
    ) -> tuple[dict[str, Code], redis.RedisError | None]:
        """Renew every lease, one call per queue (a queue's leases share its slot); return the
        code of each job renewed and the error that stopped the others, if one did.

        One Redis: the first error stops the tick (Redis is down for every queue). A cluster:
        a queue whose master fails is skipped and the others' leases are still renewed, so a
        master's failover cannot cost the jobs of the other masters' queues their leases.
        """
        codes: dict[str, Code] = {}
        error: redis.RedisError | None = None
        for queue in dict.fromkeys(queue for *_, queue in running):
            mine = [(job_id, token) for _, _, job_id, token, q in running if q == queue]
            try:
                renewed = self.scripts.renew(mine, queue=queue)
            except redis.RedisError as exc:
                error = exc
                if not is_cluster(self.scripts.redis):
                    break
                continue
            for (job_id, _), code in zip(mine, renewed, strict=True):
                codes[job_id] = code
        return codes, error

    def _running(self) -> list[tuple[Child, int, str, int, str]]:
        """Return (child, slot, job id, token, queue) of each job running: one per slot (a
        worker process with WORKER_THREADS runs one job per thread, each in its own slot)."""
        running = []
        for child in self.roster.of_kind(WORKER):
            if child.kill_reason is not None or self.roster.spawner.stopped(child.pid):
                continue  # a stopped process is not working on its jobs: let the leases run out
            for index, state in self.roster.slot_states(child):
                if state is None or not state.job_id:
                    continue
                queue = state.queue or DEFAULT_QUEUE
                running.append((child, index, state.job_id, state.token, queue))
        return running
