"""Redis key names: the only place they are formatted.

Every key starts with one prefix (default ``{taskforge}:v1:``). The ``{…}`` part is a Redis
Cluster hash tag, so every key a script touches hashes to one slot; ``v1`` is the schema
version, so a future layout can live beside this one during a migration.
"""

from __future__ import annotations

from dataclasses import dataclass

JOB_KEY_INFIX = "job:"


@dataclass(frozen=True)
class Keys:
    """Builds every key name from one prefix."""

    prefix: str = "{taskforge}:v1:"

    def job(self, job_id: str) -> str:
        """Return the hash that holds one job's metadata."""
        return f"{self.prefix}{JOB_KEY_INFIX}{job_id}"

    @property
    def job_prefix(self) -> str:
        """Return the prefix scripts use to build job keys for ids they pop from an index."""
        return f"{self.prefix}{JOB_KEY_INFIX}"

    @property
    def pending(self) -> str:
        """Return the zset of claimable jobs: score -priority, member ``<seq>:<id>``."""
        return f"{self.prefix}pending"

    @property
    def pending_since(self) -> str:
        """Return the zset of claimable job ids scored by when they became claimable (ms)."""
        return f"{self.prefix}pending_since"

    @property
    def seq(self) -> str:
        """Return the counter that orders equal priorities first-in, first-out."""
        return f"{self.prefix}seq"

    @property
    def processing(self) -> str:
        """Return the zset of running job ids scored by lease deadline (ms)."""
        return f"{self.prefix}processing"

    @property
    def scheduled(self) -> str:
        """Return the zset of job ids waiting for their ``scheduled_at`` (ms)."""
        return f"{self.prefix}scheduled"

    @property
    def retrying(self) -> str:
        """Return the zset of job ids waiting out their retry backoff (ms)."""
        return f"{self.prefix}retrying"

    @property
    def completed(self) -> str:
        """Return the zset of completed job ids scored by finish time (ms)."""
        return f"{self.prefix}completed"

    @property
    def canceled(self) -> str:
        """Return the zset of canceled job ids scored by cancel time (ms)."""
        return f"{self.prefix}canceled"

    @property
    def dead(self) -> str:
        """Return the dead-letter queue: job ids scored by time of death (ms)."""
        return f"{self.prefix}dead"

    @property
    def wake(self) -> str:
        """Return the capped list of wake-up hints that idle workers block on."""
        return f"{self.prefix}wake"

    def idempotency(self, key: str) -> str:
        """Return the key that remembers which job an ``Idempotency-Key`` created."""
        return f"{self.prefix}idem:{key}"

    def tombstone(self, job_id: str) -> str:
        """Return the short-lived marker a purge leaves so a repeated purge still succeeds."""
        return f"{self.prefix}purged:{job_id}"

    def reply(self, request_id: str) -> str:
        """Return the key that keeps a batch script's answer for a repeated call (15 s)."""
        return f"{self.prefix}reply:{request_id}"

    def last_claim(self, worker_id: str) -> str:
        """Return the key that makes a worker's repeated claim call return the same job.

        Written by a claim on its own (claim.lua); a complete that claims the next job needs
        none (its token tells a repeat), so only scripts may read it.
        """
        return f"{self.prefix}claim:{worker_id}"

    @property
    def workers(self) -> str:
        """Return the zset of worker ids scored by last heartbeat (ms)."""
        return f"{self.prefix}workers"

    @property
    def worker_prefix(self) -> str:
        """Return the prefix the stats script builds worker record keys from."""
        return f"{self.prefix}worker:"

    def worker(self, worker_id: str) -> str:
        """Return the hash describing one worker process."""
        return f"{self.prefix}worker:{worker_id}"

    def state_index(self, state: str) -> str:
        """Return the index key that holds the jobs of one state."""
        return f"{self.prefix}{state}"
