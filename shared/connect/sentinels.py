"""Asking the sentinels where the primary is, with a one-line answer when none is found.

redis-py's ``Sentinel.discover_master`` raises MasterNotFoundError with the repr of every
sentinel client it tried (about 1,500 characters each, pool and options included) and lets
a data node's ``unknown command 'SENTINEL'`` escape as a ResponseError (a traceback in the
gateway). This subclass asks the same way, and says in one line what went wrong, naming
sentinels by host:port only (never a password):

- ``no sentinel at 10.0.0.5:26379,10.0.0.6:26379 answered (connection refused)``
- ``the sentinels at 10.0.0.5:26379 do not monitor 'taskforge'``
- ``127.0.0.1:16400 is not a sentinel (it does not know the SENTINEL command)``

Each is a MasterNotFoundError, a ConnectionError: callers treat it as "Redis unavailable"
(503, backoff), as they treat any outage.
"""

from __future__ import annotations

from typing import Any

import redis.exceptions
from redis.sentinel import MasterNotFoundError, Sentinel


class ExplainingSentinel(Sentinel):
    """A Sentinel manager whose MasterNotFoundError says why, in one line."""

    def discover_master(self, service_name: str) -> tuple[str, int]:
        unreachable: list[tuple[str, str]] = []  # (host:port, reason)
        not_sentinels: list[str] = []
        silent: list[str] = []  # answered, but do not monitor the service
        down: list[str] = []  # monitor it, but see its primary down
        for number, sentinel in enumerate(self.sentinels):
            where = address_of(sentinel)
            try:
                masters = sentinel.sentinel_masters()
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                unreachable.append((where, _reason(exc)))
                continue
            except redis.exceptions.ResponseError as exc:
                if "unknown command" in str(exc).lower():
                    not_sentinels.append(where)
                else:
                    unreachable.append((where, _reason(exc)))
                continue
            state = masters.get(service_name)
            if state and self.check_master_state(state, service_name):
                # As redis-py does: the sentinel that answered is asked first next time.
                self.sentinels[0], self.sentinels[number] = sentinel, self.sentinels[0]
                ip = self._force_master_ip if self._force_master_ip is not None else state["ip"]
                return ip, state["port"]
            (down if state else silent).append(where)
        raise MasterNotFoundError(
            explain(
                service_name,
                unreachable=unreachable,
                not_sentinels=not_sentinels,
                silent=silent,
                down=down,
            )
        )


def explain(
    service: str,
    *,
    unreachable: list[tuple[str, str]],
    not_sentinels: list[str],
    silent: list[str],
    down: list[str],
) -> str:
    """Return the one line that says why no sentinel named a primary for `service`."""
    parts = []
    if unreachable:
        reasons = "; ".join(dict.fromkeys(reason for _where, reason in unreachable))
        where = ",".join(where for where, _reason in unreachable)
        parts.append(f"no sentinel at {where} answered ({reasons})")
    for where in not_sentinels:
        parts.append(
            f"{where} is not a sentinel (it does not know the SENTINEL command): "
            "list the sentinels in REDIS_URL, not the data nodes"
        )
    if silent:
        parts.append(f"the sentinels at {','.join(silent)} do not monitor {service!r}")
    if down:
        parts.append(f"the sentinels at {','.join(down)} see the primary of {service!r} down")
    return "; ".join(parts) or f"no sentinel to ask for {service!r}"


def address_of(client: redis.Redis) -> str:
    """Return ``host:port`` of a sentinel client (from its pool's options, never a password)."""
    kwargs: dict[str, Any] = client.connection_pool.connection_kwargs
    host, port = kwargs.get("host", "?"), kwargs.get("port", "?")
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def _reason(exc: BaseException) -> str:
    """Return a short lower-case reason: "connection refused", "timed out", ..."""
    if isinstance(exc, redis.exceptions.AuthenticationError) or "AUTH" in str(exc):
        return "authentication failed: check REDIS_SENTINEL_PASSWORD"
    if isinstance(exc, redis.exceptions.TimeoutError):
        return "timed out"
    text = str(exc)
    # redis-py: "Error 111 connecting to 127.0.0.1:26379. Connection refused."
    if "connecting to" in text and ". " in text:
        text = text.split(". ", 1)[1]
    return text.strip().rstrip(".").lower()[:120] or type(exc).__name__
