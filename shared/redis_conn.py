"""Build every Redis client a TaskForge process uses, from the settings.

This is the one place a client is made: the gateway's bounded pool, workerd's supervisor and
children, the events tail's own connection and the tools all come through ``connect`` (or
``like``, for a client shaped after one in hand), so how Redis is reached (one server, or a
primary found through Sentinel) differs here only.
"""

from __future__ import annotations

import os
import re
from typing import Any

import redis
import redis.exceptions
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry
from redis.sentinel import SentinelConnectionPool

from shared.config import SentinelTarget, Settings, redact_url, sentinel_target
from shared.sentinels import ExplainingSentinel

HEALTH_CHECK_INTERVAL = 30  # seconds idle before a pooled connection is PINGed on reuse
# Two quick retries ride out a blip (a failover, a dropped idle connection) without hiding
# an outage. Every script is safe to run twice, which a retried reply-lost call can cause.
RETRIES = 2
BACKOFF_CAP = 0.5  # seconds

_ROLE = re.compile(r"[A-Za-z0-9_.-]+")


def default_retry() -> Retry:
    """Return the retry every client gets unless its caller passes its own."""
    return Retry(
        ExponentialBackoff(cap=BACKOFF_CAP),
        RETRIES,
        supported_errors=(redis.exceptions.ConnectionError, redis.exceptions.TimeoutError),
    )


def connect(
    settings: Settings,
    *,
    role: str,
    max_connections: int | None = None,
    pool_wait: float | None = None,
    socket_timeout: float | None = None,
    connect_timeout: float | None = None,
    retry: Retry | None = None,
) -> redis.Redis:
    """Return a Redis client for this process, named ``taskforge-<role>-<pid>``.

    `max_connections` bounds its pool; with `pool_wait` too, a caller finding every connection
    busy waits that many seconds for one (then ConnectionError) instead of failing at once.
    `socket_timeout` and `connect_timeout` replace the settings' (callers pass a shorter one);
    `retry` replaces the default two quick retries of a connection error or timeout.

    Call it after fork, in the process that will use it: a client built before ``os.fork()``
    shares its sockets with the child, and two processes on one socket read each other's
    replies. The pid in the client name (see CLIENT LIST) is also only right after the fork.
    """
    if not _ROLE.fullmatch(role):
        # CLIENT SETNAME refuses spaces; keep names greppable.
        raise ValueError(f"role must match {_ROLE.pattern}, got {role!r}")
    options: dict[str, Any] = {
        "socket_timeout": (
            settings.redis_socket_timeout if socket_timeout is None else socket_timeout
        ),
        "socket_connect_timeout": (
            settings.redis_connect_timeout if connect_timeout is None else connect_timeout
        ),
        "health_check_interval": HEALTH_CHECK_INTERVAL,
        "decode_responses": False,  # the engine decodes what it reads itself
        "retry": retry or default_retry(),
        "client_name": f"taskforge-{role}-{os.getpid()}",
    }
    target = sentinel_target(settings.redis_url)
    if target is not None:
        return _client(_sentinel_pool(target, settings, options, max_connections, pool_wait))
    if settings.redis_url.startswith("rediss://"):
        # Only TLS connections take this option; a unix or plain TCP one would reject it.
        options["ssl_cert_reqs"] = settings.redis_ssl_cert_reqs
    pool: redis.ConnectionPool
    if max_connections is not None and pool_wait is not None:
        pool = redis.BlockingConnectionPool.from_url(
            settings.redis_url, max_connections=max_connections, timeout=pool_wait, **options
        )
    else:
        pool = redis.ConnectionPool.from_url(
            settings.redis_url, max_connections=max_connections, **options
        )
    return _client(pool)


def like(
    client: redis.Redis, *, max_connections: int, socket_timeout: float | None = None
) -> redis.Redis:
    """Return a client of its own pool that reaches Redis as `client` does (same server or
    Sentinel service, TLS, name, retry), with at most `max_connections` connections and,
    when given, another `socket_timeout` (the events tail's XREAD BLOCK outwaits the usual).
    """
    pool = client.connection_pool
    kwargs = dict(pool.connection_kwargs)
    if socket_timeout is not None:
        kwargs["socket_timeout"] = socket_timeout
    own: redis.ConnectionPool
    if isinstance(pool, SentinelConnectionPool):
        # The same sentinels and service; the pool gives its connections their own proxy.
        kwargs.pop("connection_pool")
        own = SentinelConnectionPool(
            pool.service_name,
            pool.sentinel_manager,
            connection_class=pool.connection_class,
            max_connections=max_connections,
            is_master=pool.is_master,
            **kwargs,
        )
    else:
        own = redis.ConnectionPool(
            connection_class=pool.connection_class, max_connections=max_connections, **kwargs
        )
    return _client(own)


class BlockingSentinelConnectionPool(SentinelConnectionPool, redis.BlockingConnectionPool):
    """A Sentinel pool that, like redis.BlockingConnectionPool, waits `timeout` seconds for a
    free connection when all `max_connections` are busy (redis-py has none of its own)."""


def _sentinel_pool(
    target: SentinelTarget,
    settings: Settings,
    options: dict[str, Any],
    max_connections: int | None,
    pool_wait: float | None,
) -> SentinelConnectionPool:
    """Return a pool whose every new connection asks the sentinels where the primary is.

    A connection that finds its server gone (refused, reset) or demoted (READONLY, which
    redis-py's SentinelManagedConnection turns into a ConnectionError) is dropped, and the
    retry connects again through the sentinels: to the promoted replica once they agree.
    """
    data = dict(options, db=target.db, username=target.username, password=target.password)
    asking: dict[str, Any] = {
        "socket_timeout": options["socket_timeout"],
        "socket_connect_timeout": options["socket_connect_timeout"],
        "password": settings.redis_sentinel_password,
        # The next sentinel in the list is the retry: one down must not cost backoff sleeps.
        "retry": Retry(NoBackoff(), 0),
    }
    if target.tls:
        data.update(ssl=True, ssl_cert_reqs=settings.redis_ssl_cert_reqs)
        asking.update(ssl=True, ssl_cert_reqs=settings.redis_ssl_cert_reqs)
    # Its MasterNotFoundError says in one line why no primary was found (shared/sentinels.py).
    manager = ExplainingSentinel(list(target.sentinels), sentinel_kwargs=asking)
    if max_connections is not None and pool_wait is not None:
        return BlockingSentinelConnectionPool(
            target.service,
            manager,
            is_master=True,
            max_connections=max_connections,
            timeout=pool_wait,
            **data,
        )
    return SentinelConnectionPool(
        target.service, manager, is_master=True, max_connections=max_connections, **data
    )


def primary(client: redis.Redis) -> str | None:
    """Return ``host:port`` of the primary a Sentinel client last found, None for a client of
    one server (its address is the configured one) or before its first connection."""
    pool = client.connection_pool
    if not isinstance(pool, SentinelConnectionPool) or pool.master_address is None:
        return None
    host, port = pool.master_address
    return f"{host}:{port}"


def _client(pool: redis.ConnectionPool) -> redis.Redis:
    """Return a client that owns `pool`: closing the client disconnects it."""
    return redis.Redis.from_pool(pool)


def describe(url: str) -> str:
    """Return ``url`` without its password, fit for a log line."""
    return redact_url(url)
