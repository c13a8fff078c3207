"""Capped exponential backoff with jitter for Redis outages, logged once per state change."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

from shared.obs.log import error_text
from shared.settings.config import redact_url

log = logging.getLogger(__name__)


class Backoff:
    """Waits longer after each consecutive failure: 0.1 s doubling to a cap, with jitter."""

    def __init__(
        self,
        what: str,
        *,
        redis_url: str = "",
        first: float = 0.1,
        cap: float = 3.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.what = what
        self.sleep = sleep
        self.redis_url = redact_url(redis_url)  # names host and port in the outage line
        self.first = first
        self.cap = cap
        self.failures = 0

    def delay(self) -> float:
        """Return how long to wait after the current run of failures (full jitter above half)."""
        ceiling = min(self.cap, self.first * 2 ** max(0, self.failures - 1))
        return random.uniform(ceiling / 2, ceiling)

    def failed(self, exc: BaseException) -> float:
        """Record a failure, log it if it starts an outage, and return the wait before retrying."""
        self.failures += 1
        if self.failures == 1:
            log.warning(
                "redis_unavailable",
                extra={"component": self.what, "redis": self.redis_url, "error": error_text(exc)},
            )
        return self.delay()

    def wait(self, exc: BaseException) -> None:
        """Record a failure and sleep through the backoff."""
        self.sleep(self.failed(exc))

    def succeeded(self) -> None:
        """Record a success; log the end of an outage."""
        if self.failures:
            log.info("redis_available", extra={"component": self.what, "failures": self.failures})
        self.failures = 0
