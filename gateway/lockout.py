"""Failed authentications per client address: after max_failures, 429 until the window ends.

One count for the bearer-token check and the dashboard's login form (both guess the API
token), kept in Redis (``Keys.auth_failures``, the global slot) so every gateway process and
host adds to it: a counter that expires WINDOW after the first failure it counts. Once it
holds max_failures (TASKFORGE_AUTH_MAX_FAILURES, 10), every request from that address that presents a token (right or wrong)
answers 429 with Retry-After until it expires; nobody sleeps, so guessing costs the gateway
no thread. A legitimate user who mistypes is locked out at most WINDOW, after that many
mistakes in it.

What a success costs: nothing, unless this process has seen a failure from that address in
the last WINDOW. Only then can the address be locked as far as this process knows, and only
then does it read the count first (one round trip), so a locked-out guesser's right guess is
refused too. Once a process knows an address is locked it refuses it without Redis until the
counter expires: a guesser's flood costs Redis nothing. A process that has not yet seen a failure from an address lets a right token
through unread: each process grants a guesser at most one unchecked guess per window (its
first request there), since its first wrong guess there teaches that process. The counter
itself is shared: a wrong guess in any process counts for all.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass

import redis

from gateway.client_address import counted_as
from gateway.http_errors import ApiError
from shared.engine.keys import Keys
from shared.settings.config import AUTH_MAX_FAILURES_DEFAULT

log = logging.getLogger(__name__)

MAX_FAILURES = AUTH_MAX_FAILURES_DEFAULT  # failed tries from one address before its lockout
WINDOW_SECONDS = 60  # a count lasts this long from its first failure
# Addresses a process remembers having seen fail; past this the oldest are forgotten (each
# forgotten one may get one unchecked request in this process, as a newcomer does).
REMEMBERED_MAX = 10_000


@dataclass(frozen=True)
class Locked:
    """An address that may not authenticate for ``retry_after`` more seconds."""

    client: str
    retry_after: int

    def error(self) -> ApiError:
        """Return the API's 429 for this lockout."""
        return ApiError(
            429,
            f"too many failed authentications from this address: try again in {self.retry_after} s",
            headers={"Retry-After": str(self.retry_after)},
            retry_after=self.retry_after,
        )


class Lockout:
    """The shared failure count and this process's memory of which addresses have one."""

    def __init__(self, client: redis.Redis, keys: Keys, max_failures: int = MAX_FAILURES) -> None:
        self._redis = client
        self._keys = keys
        self.max_failures = max_failures
        self._lock = threading.Lock()
        # Counted address -> (monotonic end of its counter's window, locked out already).
        self._seen: dict[str, tuple[float, bool]] = {}

    def check(self, client: str) -> Locked | None:
        """Return the lockout of `client` before its token is compared, or None.

        No Redis command unless this process saw `client` fail within the window, and none
        while it knows the address is locked (a lockout never ends before its counter expires).
        """
        counted = counted_as(client)
        seen = self._seen.get(counted)
        if seen is None:
            return None
        deadline, locked = seen
        now = time.monotonic()
        if deadline <= now:
            with self._lock:
                self._seen.pop(counted, None)
            return None
        if locked:
            return Locked(client, _seconds((deadline - now) * 1000))
        pipe = self._redis.pipeline(transaction=False)
        key = self._keys.auth_failures(counted)
        pipe.get(key)
        pipe.pttl(key)
        count, ttl_ms = pipe.execute()
        if count is None or int(count) < self.max_failures or ttl_ms <= 0:
            return None
        self._remember(counted, ttl_ms, locked=True)
        return Locked(client, _seconds(ttl_ms))

    def failed(self, client: str, surface: str) -> Locked | None:
        """Count a wrong token from `client`; return its lockout when it now has one.

        ``surface`` (``api`` or ``login``) only goes into the log line, as does the address:
        never what was tried.
        """
        counted = counted_as(client)
        key = self._keys.auth_failures(counted)
        pipe = self._redis.pipeline(transaction=False)
        pipe.incr(key)
        # NX: the window runs from the first failure, not the last. Always after the INCR, so
        # a counter that expired between the two still gets its expiry: none lives forever.
        pipe.pexpire(key, WINDOW_SECONDS * 1000, nx=True)
        pipe.pttl(key)
        count, _, ttl_ms = pipe.execute()
        ttl_ms = ttl_ms if ttl_ms > 0 else WINDOW_SECONDS * 1000
        self._remember(counted, ttl_ms, locked=count >= self.max_failures)
        if count == self.max_failures:  # once per lockout, across every process
            log.warning(
                "auth_lockout",
                extra={
                    "client": client,
                    "counted_as": counted,
                    "surface": surface,
                    "failures": count,
                    "retry_after": _seconds(ttl_ms),
                },
            )
        if count < self.max_failures:
            return None
        return Locked(client, _seconds(ttl_ms))

    def _remember(self, counted: str, ttl_ms: int, *, locked: bool) -> None:
        with self._lock:
            self._seen.pop(counted, None)  # re-inserted last: the newest
            self._seen[counted] = (time.monotonic() + ttl_ms / 1000, locked)
            if len(self._seen) > REMEMBERED_MAX:
                now = time.monotonic()
                for address in [a for a, (d, _) in self._seen.items() if d <= now]:
                    del self._seen[address]
                while len(self._seen) > REMEMBERED_MAX:
                    del self._seen[next(iter(self._seen))]


def _seconds(ttl_ms: int) -> int:
    """Return a Retry-After in whole seconds, never 0 while locked."""
    return max(1, math.ceil(ttl_ms / 1000))
