"""Loading the engine's scripts into Redis: at start, and again with backoff while Redis is away.

Ready means Redis has answered; a syntax error in a script fails here, not at the first job.
"""

from __future__ import annotations

import logging

import redis

from shared.engine.redis_checks import warn_about_redis
from shared.engine.scripts import Scripts
from workerd.backoff import Backoff

log = logging.getLogger(__name__)


class ScriptLoader:
    """Loads the scripts once; `loaded` tells the readiness duty that Redis answered."""

    def __init__(self, scripts: Scripts, backoff: Backoff) -> None:
        self.scripts = scripts
        self.backoff = backoff
        self.loaded = False
        self.next_attempt = 0.0

    def tick(self, now: float) -> None:
        """Load when not yet loaded and the backoff allows."""
        if self.loaded or now < self.next_attempt:
            return
        try:
            self.scripts.load()
        except redis.RedisError as exc:
            # Not fatal: the children back off and retry on their own, and so does this.
            self.next_attempt = now + self.backoff.failed(exc)
            return
        self.loaded = True
        self.backoff.succeeded()
        # Eviction or no persistence loses jobs; in durable mode, too few replicas blocks writes.
        warn_about_redis(self.scripts.redis, log, self.scripts.policy.wait_replicas)
