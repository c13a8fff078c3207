"""Build every Redis client a TaskForge process uses, from the settings.

This is the one place a client is made: the gateway's bounded pool, workerd's supervisor and
children, the events tail's own connection and the tools all come through ``connect`` (or
``like``, for a client shaped after one in hand), so how Redis is reached (one server, a
primary found through Sentinel, or a Redis Cluster) differs here only.

A cluster (``redis+cluster://``, shared.settings.cluster_url) gets redis-py's ``RedisCluster``: it routes
each command, and each script call by its first key, to the master owning the slot, follows
MOVED after a failover or resharding, and loads scripts on every master. Code that needs one
node's view (a blocking pop, XREAD of several streams) asks ``is_cluster``.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
import redis.cluster
import redis.exceptions
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.connection import Encoder
from redis.retry import Retry
from redis.sentinel import SentinelConnectionPool

from shared.connect.cluster_routing import SCRIPTS_BY_KEYS
from shared.connect.command_packer import CommandPacker
from shared.connect.sentinels import ExplainingSentinel
from shared.settings.cluster_url import is_cluster_url, parse_cluster_url
from shared.settings.config import SentinelTarget, Settings, redact_url, sentinel_target

HEALTH_CHECK_INTERVAL = 30  # seconds idle before a pooled connection is PINGed on reuse
# Two quick retries ride out a blip (a failover, a dropped idle connection) without hiding
# an outage. Every script is safe to run twice, which a retried reply-lost call can cause.
RETRIES = 2
BACKOFF_CAP = 0.5  # seconds

_ROLE = re.compile(r"[A-Za-z0-9_.-]+")
# Every connection on one Redis or under Sentinel packs its commands with this (stateless).
PACKER = CommandPacker()


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
        options["command_packer"] = PACKER
        return _client(_sentinel_pool(target, settings, options, max_connections, pool_wait))
    if settings.redis_url.startswith(("rediss://", "rediss+cluster://")):
        # Only TLS connections take this option; a unix or plain TCP one would reject it.
        options["ssl_cert_reqs"] = settings.redis_ssl_cert_reqs
    if is_cluster_url(settings.redis_url):
        return _cluster(settings.redis_url, options, max_connections, pool_wait)
    options["command_packer"] = PACKER
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
    if isinstance(client, TaskForgeCluster):
        options = dict(client.recipe.options)
        if socket_timeout is not None:
            options["socket_timeout"] = socket_timeout
        return _cluster(client.recipe.url, options, max_connections, None)
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


@dataclass(frozen=True)
class ClusterRecipe:
    """How a cluster client was made, so ``like`` can make another."""

    url: str
    options: dict[str, Any]


class TaskForgeCluster(redis.cluster.RedisCluster):
    """A RedisCluster that remembers how it was built (``recipe``), and whose pipelines route
    script calls by their keys (shared.connect.cluster_routing: a failing master's neighbours run
    pipelined scripts still)."""

    recipe: ClusterRecipe

    def pipeline(self, transaction: Any = None, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        # RedisCluster hands its pipelines no policy resolver of its own choosing.
        pipe._policy_resolver = SCRIPTS_BY_KEYS
        return pipe


def is_cluster(client: object) -> bool:
    """Tell whether `client` talks to a Redis Cluster (a pipeline of one counts too)."""
    kind = type(client)
    known = _CLUSTER_TYPES.get(kind)
    if known is None:
        known = _CLUSTER_TYPES[kind] = isinstance(client, redis.cluster.RedisCluster)
    return known


# is_cluster's answers by the client's class. isinstance against redis-py's cluster class goes
# through typing's protocol check every time: 5 % of a worker's call, asked once an enqueue and
# once a job (bench.job_parts). The answer depends on the class alone (no class here registers
# virtual subclasses), so it is asked once a class.
_CLUSTER_TYPES: dict[type, bool] = {}


def _cluster(
    url: str, options: dict[str, Any], max_connections: int | None, pool_wait: float | None
) -> redis.Redis:
    """Return a cluster client: `options` go to every node's connections, bounded per node."""
    parsed = parse_cluster_url(url)
    node_options = {k: v for k, v in options.items() if k != "retry"}
    if parsed.tls:
        node_options["ssl"] = True
    if max_connections is not None:
        node_options["max_connections"] = max_connections
        if pool_wait is not None:
            # Each node's pool blocks a caller up to pool_wait for a free connection.
            # (bound here: a `timeout` option would reach redis.Redis() too, which has none)
            node_options["connection_pool_class"] = functools.partial(
                redis.BlockingConnectionPool, timeout=pool_wait
            )
    recipe = ClusterRecipe(url, options)

    def build() -> TaskForgeCluster:
        client = TaskForgeCluster(
            startup_nodes=[redis.cluster.ClusterNode(host, port) for host, port in parsed.seeds],
            username=parsed.username,
            password=parsed.password,
            # The cluster-level retry: a connection error or MOVED/TRYAGAIN refreshes the slot
            # map and tries again (a failover); the nodes' own connections retry nothing beneath.
            retry=options.get("retry") or default_retry(),
            **node_options,
        )
        client.recipe = recipe
        return client

    try:
        return build()  # type: ignore[return-value]  # the engine uses the commands both share
    except redis.exceptions.RedisClusterException as exc:
        if not str(exc).startswith(NO_SEED_REACHABLE):
            raise  # e.g. a seed that is no cluster node: a configuration error, said as is
        # Not one seed answers yet (a cluster briefly down at deploy time): hand out a client
        # that builds itself on first use, so the process starts and waits like one whose
        # plain redis:// server is down, instead of dying here.
        return _PendingCluster(build, recipe, parsed.seeds, node_options)  # type: ignore[return-value]


# The start of redis-py's message when it reaches none of the seeds while building the client.
NO_SEED_REACHABLE = "Redis Cluster cannot be connected"


class SeedsUnreachableError(redis.exceptions.ConnectionError):
    """No seed of the cluster answered: a ConnectionError, so every caller treats it as an
    outage (503, backoff, /ready's reason) like a plain server that is down."""


class _PendingCluster(TaskForgeCluster):
    """A cluster client not built yet, because none of its seeds answered.

    RedisCluster's constructor needs a reachable seed to learn the slot map. This stand-in
    holds no state of a client: the first attribute a caller (or an inherited method) looks
    up tries the build again; on success the instance becomes that client in place (same
    object, so every holder of it sees the cluster), otherwise the lookup raises
    SeedsUnreachableError with one line naming the seeds (the encoder, which needs no
    Redis, is set at once: building Scripts reads it). Each caller's own backoff paces
    the attempts, as it paces reconnecting to a plain server.
    """

    def __init__(
        self,
        build: Callable[[], TaskForgeCluster],
        recipe: ClusterRecipe,
        seeds: Any,
        node_options: dict[str, Any],
    ) -> None:  # no super().__init__: that is the build that needs a reachable seed
        object.__setattr__(self, "_pending", (build, threading.Lock(), seeds))
        object.__setattr__(self, "recipe", recipe)
        # What register_script reads at once, as RedisCluster sets it (no Redis needed).
        self.encoder = Encoder(
            node_options.get("encoding", "utf-8"),
            node_options.get("encoding_errors", "strict"),
            node_options.get("decode_responses", False),
        )

    def __getattr__(self, name: str) -> Any:
        # Only called for names the instance lacks: every one while not yet built.
        if name.startswith("__"):
            raise AttributeError(name)
        build, lock, seeds = object.__getattribute__(self, "_pending")
        with lock:
            if type(self) is _PendingCluster:
                try:
                    client = build()
                except redis.exceptions.RedisClusterException as exc:
                    if not str(exc).startswith(NO_SEED_REACHABLE):
                        raise
                    shown = ",".join(f"{host}:{port}" for host, port in seeds)
                    raise SeedsUnreachableError(
                        f"no seed of the Redis Cluster answers ({shown})"
                    ) from None
                self.__dict__.update(client.__dict__)
                self.__class__ = TaskForgeCluster  # type: ignore[assignment]
        return object.__getattribute__(self, name)

    def close(self) -> None:
        """Close nothing: no connection was made (RedisCluster.close would try the seeds)."""

    def __del__(self) -> None:
        # Never built, nothing to close (RedisCluster.__del__ would try the seeds to close
        # it). Once built, the instance is a TaskForgeCluster and RedisCluster's applies.
        pass


# What a cluster master's failure looks like to a call on one of its slots.
MASTER_DOWN = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.SlotNotCoveredError,
)


def read_each(client: redis.Redis, reads: Sequence[Callable[[Any], Any]]) -> list[Any]:
    """Queue each read on one pipeline and return the replies, in order.

    On a cluster, a master that fails (until its replica is promoted) fails the whole
    pipeline: then each read goes alone, and a failed one's reply is its exception, so a
    lookup across queues still finds a job on the masters that answer. On one Redis an error
    is raised as ever.
    """
    pipe = client.pipeline(transaction=False)
    for read in reads:
        read(pipe)
    try:
        return pipe.execute()
    except MASTER_DOWN:
        if not is_cluster(client):
            raise
    replies: list[Any] = []
    for read in reads:
        alone = client.pipeline(transaction=False)
        read(alone)
        try:
            replies.append(alone.execute()[0])
        except MASTER_DOWN as exc:
            replies.append(exc)
    return replies


def pipe_time(pipe: Any, client: redis.Redis, key: str) -> None:
    """Queue a TIME on `pipe` (made by `client`): on a cluster, to the master owning `key`.

    A cluster has one clock per master; a reader of a slot's timestamps asks that slot's
    master, and redis-py's cluster pipeline refuses its own ``time`` method anyway.
    """
    if is_cluster(client):
        node = client.get_node_from_key(key)  # type: ignore[attr-defined]
        pipe.execute_command("TIME", target_nodes=node)
    else:
        pipe.time()


def disconnect(client: redis.Redis) -> None:
    """Close every connection of a client that owns its pool (or its nodes' pools)."""
    if is_cluster(client):
        client.close()
    else:
        client.connection_pool.disconnect()


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
    # Its MasterNotFoundError says in one line why no primary was found (shared/connect/sentinels.py).
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
    if is_cluster(client):
        return None  # no one primary: each slot has its master
    pool = client.connection_pool
    if not isinstance(pool, SentinelConnectionPool) or pool.master_address is None:
        return None
    host, port = pool.master_address
    return f"{host}:{port}"


def primary_named(client: redis.Redis) -> dict[str, str]:
    """Return ``{"primary": host:port}`` for a /health or /ready body under Sentinel (after a
    failover, the promoted replica); nothing when ``primary`` knows none."""
    found = primary(client)
    return {"primary": found} if found else {}


def _client(pool: redis.ConnectionPool) -> redis.Redis:
    """Return a client that owns `pool`: closing the client disconnects it."""
    return redis.Redis.from_pool(pool)


def describe(url: str) -> str:
    """Return ``url`` without its password, fit for a log line."""
    return redact_url(url)
