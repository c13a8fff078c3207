"""Start-up check of the Redis the queue lives in: can it evict queue keys, does it persist?

Both entry points call :func:`warn_about_redis` once at start. Each problem found is logged as
a ``config_warning`` line and exported as ``taskforge_redis_unsafe_config{problem=...}`` = 1
(0 once checked and fine). A setting that costs memory but never a job (job hashes stored as
hashtables) is a ``config_warning`` line only, outside the gauge of what can lose jobs. Managed services that refuse ``CONFIG`` leave both unknown: no
sample, and one warning that says what to verify with the provider instead.

Both also call :func:`refuse_cluster_node_behind_plain_url` before they serve: a plain URL
naming a node of a Redis Cluster is a configuration error (exit 2, one line).

prometheus_client is imported inside the function, never at module level: entry points may
import this module before they set up the multiprocess directory (see shared/obs/multiproc.py).
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from dataclasses import dataclass
from typing import Any

import redis
import redis.exceptions
from redis.backoff import NoBackoff
from redis.retry import Retry

from shared.connect.redis_conn import connect, disconnect, is_cluster
from shared.engine import durable
from shared.settings.cluster_url import is_cluster_url
from shared.settings.config import Settings

EVICTION = "eviction"
PERSISTENCE = "persistence"
METRIC = "taskforge_redis_unsafe_config"
# deploy/redis.conf's value: job hashes whose values (payload, result, traceback) stay under it
# are listpacks, about half the bytes of a hashtable (docs/JOBS.md, "Sizing Redis").
LISTPACK_VALUE_ADVISED = 512
UNCHECKED = (
    "Redis refused CONFIG GET, so its eviction and persistence settings were not checked: "
    "make sure the service uses maxmemory-policy noeviction and keeps its data on restart"
)

# A plain redis:// URL naming one node of a cluster answers PING and SCRIPT LOAD, then fails
# every command on a key the node does not own with MOVED: say what to write instead.
CLUSTER_NODE_BEHIND_PLAIN_URL = (
    "REDIS_URL names a node of a Redis Cluster: use redis+cluster://host:port[,host:port...]"
)
START_CHECK_TIMEOUT = 2.0  # seconds; an unreachable Redis is not this check's to wait for

_gauge: Any = None  # the Gauge, created on first use (see the module docstring)


@dataclass(frozen=True)
class RedisCheck:
    """What CONFIG GET told about eviction and persistence; None fields when it was refused."""

    maxmemory_policy: str | None
    appendonly: bool | None
    save: str | None
    problems: dict[str, str]
    advice: tuple[str, ...] = ()  # settings that cost memory, never jobs

    @property
    def checked(self) -> bool:
        """Tell whether Redis answered CONFIG GET."""
        return self.maxmemory_policy is not None


def check_redis(client: redis.Redis) -> RedisCheck:
    """Read the eviction and persistence settings; describe each problem (never raises)."""
    try:
        configs = _configs(client)
    except redis.exceptions.RedisError:
        # CONFIG disabled or renamed (many managed services), no permission, or no Redis.
        return RedisCheck(None, None, None, {})
    # On a cluster every master is checked: each problem found on any of them is told, and
    # the settings shown are those of the master with the most of them (eviction first).
    checks = [_check(text) for text in configs]
    shown = max(checks, key=lambda c: (EVICTION in c.problems, len(c.problems)))
    problems: dict[str, str] = {}
    advice: dict[str, None] = {}
    for check in checks:
        for problem, text in check.problems.items():
            problems.setdefault(problem, text)
        advice.update(dict.fromkeys(check.advice))
    return dataclasses.replace(shown, problems=problems, advice=tuple(advice))


def _configs(client: redis.Redis) -> list[dict[str, str]]:
    """Return the settings we check, of the one Redis or of each cluster master."""
    names = ("maxmemory-policy", "appendonly", "save", "hash-max-listpack-value")
    if not is_cluster(client):
        config: dict[Any, Any] = {}
        for name in names:
            config.update(client.config_get(name))
        return [{_str(k): _str(v) for k, v in config.items()}]
    per_node: dict[str, dict[str, str]] = {}
    for name in names:
        replies = client.config_get(name, target_nodes=client.PRIMARIES)  # type: ignore[call-arg,attr-defined]
        for node, reply in replies.items():
            per_node.setdefault(node, {}).update({_str(k): _str(v) for k, v in reply.items()})
    return [per_node[node] for node in sorted(per_node)]


def _check(text: dict[str, str]) -> RedisCheck:
    """Describe the problems of one server's settings."""
    policy, save = text.get("maxmemory-policy", ""), text.get("save", "")
    appendonly = text.get("appendonly", "no") == "yes"
    problems = {}
    if policy != "noeviction":
        problems[EVICTION] = (
            f"Redis maxmemory-policy is {policy}: when memory runs out it may silently "
            "delete queue keys, losing jobs; set maxmemory-policy noeviction"
        )
    if not appendonly and not save.strip():
        problems[PERSISTENCE] = (
            "Redis persistence is off (appendonly no, no save points): a Redis restart "
            "loses every job; set appendonly yes"
        )
    return RedisCheck(policy, appendonly, save, problems, _listpack_advice(text))


def _listpack_advice(text: dict[str, str]) -> tuple[str, ...]:
    value = text.get("hash-max-listpack-value", "")
    if not value.isdigit() or int(value) >= LISTPACK_VALUE_ADVISED:
        return ()  # unknown (an older Redis names it hash-max-ziplist-value) or fine
    return (
        f"Redis hash-max-listpack-value is {value}: a job with a payload, result or traceback "
        f"value longer than that is stored as a hashtable, about twice the memory per job; "
        f"set hash-max-listpack-value {LISTPACK_VALUE_ADVISED} as deploy/redis.conf does",
    )


def warn_about_redis(
    client: redis.Redis, log: logging.Logger, wait_replicas: int = 0
) -> RedisCheck:
    """Check the Redis configuration; log and export each problem; return what was found.

    In durable mode (`wait_replicas` ≥ 1) also warn when WAIT cannot get that many replicas
    now (shared.engine.durable.replica_shortfall), checked or not.
    """
    found = check_redis(client)
    warnings = [*found.problems.values(), *found.advice]
    if found.checked:
        gauge = _unsafe_config_gauge()
        for problem in (EVICTION, PERSISTENCE):
            gauge.labels(problem=problem).set(1 if problem in found.problems else 0)
    else:
        warnings.append(UNCHECKED)
    shortfall = durable.replica_shortfall(client, wait_replicas) if wait_replicas else None
    if shortfall is not None:
        warnings.append(shortfall)
    for warning in warnings:
        log.warning("config_warning", extra={"warning": warning})
    return found


def _unsafe_config_gauge() -> Any:
    global _gauge
    if _gauge is None:
        from prometheus_client import Gauge

        _gauge = Gauge(
            METRIC,
            "1 when Redis's configuration can lose jobs (eviction, persistence), checked at start.",
            ["problem"],
            multiprocess_mode="max",
        )
    return _gauge


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def names_cluster_node(client: redis.Redis) -> bool:
    """Tell whether a plain (not cluster) client's server is a node of a Redis Cluster."""
    try:
        info = client.info("cluster")
    except redis.exceptions.RedisError:
        return False  # unreachable, or INFO refused: nothing known, nothing to refuse
    return str(info.get("cluster_enabled", 0)) == "1"


def refuse_cluster_node_behind_plain_url(settings: Settings) -> None:
    """At start: exit 2 with one line, as for any configuration error, when REDIS_URL is a
    plain URL naming a cluster node. A restart cannot fix that; the URL must change. An
    unreachable Redis passes: the process starts and waits for it as usual."""
    if is_cluster_url(settings.redis_url):
        return  # the client routes by slot: MOVED is followed, not an error
    client = connect(
        settings,
        role="start-check",
        socket_timeout=min(settings.redis_socket_timeout, START_CHECK_TIMEOUT),
        connect_timeout=min(settings.redis_connect_timeout, START_CHECK_TIMEOUT),
        retry=Retry(NoBackoff(), 0),  # one try: a Redis that is down only delays the start
    )
    try:
        refused = names_cluster_node(client)
    finally:
        disconnect(client)
    if refused:
        print(f"taskforge: configuration error: {CLUSTER_NODE_BEHIND_PLAIN_URL}", file=sys.stderr)
        sys.exit(2)
