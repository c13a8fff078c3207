"""Build a process's Redis client from the settings."""

from __future__ import annotations

import os
import re

import redis
import redis.exceptions
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from shared.config import Settings, redact_url

HEALTH_CHECK_INTERVAL = 30  # seconds idle before a pooled connection is PINGed on reuse
# Two quick retries ride out a blip (a failover, a dropped idle connection) without hiding
# an outage. Every script is safe to run twice, which a retried reply-lost call can cause.
RETRIES = 2
BACKOFF_CAP = 0.5  # seconds

_ROLE = re.compile(r"[A-Za-z0-9_.-]+")


def connect(settings: Settings, *, role: str) -> redis.Redis:
    """Return a Redis client for this process, named ``taskforge-<role>-<pid>``.

    Call it after fork, in the process that will use it: a client built before ``os.fork()``
    shares its sockets with the child, and two processes on one socket read each other's
    replies. The pid in the client name (see CLIENT LIST) is also only right after the fork.
    """
    if not _ROLE.fullmatch(role):
        # CLIENT SETNAME refuses spaces; keep names greppable.
        raise ValueError(f"role must match {_ROLE.pattern}, got {role!r}")
    options: dict[str, object] = {}
    if settings.redis_url.startswith("rediss://"):
        # Only TLS connections take this option; a unix or plain TCP one would reject it.
        options["ssl_cert_reqs"] = settings.redis_ssl_cert_reqs
    return redis.Redis.from_url(
        settings.redis_url,
        socket_timeout=settings.redis_socket_timeout,
        socket_connect_timeout=settings.redis_connect_timeout,
        health_check_interval=HEALTH_CHECK_INTERVAL,
        decode_responses=False,  # the engine decodes what it reads itself
        retry=Retry(
            ExponentialBackoff(cap=BACKOFF_CAP),
            RETRIES,
            supported_errors=(redis.exceptions.ConnectionError, redis.exceptions.TimeoutError),
        ),
        client_name=f"taskforge-{role}-{os.getpid()}",
        **options,
    )


def describe(url: str) -> str:
    """Return ``url`` without its password, fit for a log line."""
    return redact_url(url)
