"""Fixtures of the Redis Cluster tests: one real cluster (3 masters, 3 replicas) per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.connect.redis_conn import connect
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.settings.config import Settings
from tests.support.cluster import RedisCluster, running_cluster
from tests.support.tools import require_tool


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """Run one six-node cluster for the session (both tools are required under CI)."""
    with running_cluster(require_tool("redis-server"), require_tool("redis-cli")) as cluster:
        yield cluster


@pytest.fixture
def cluster(redis_cluster: RedisCluster) -> RedisCluster:
    """Return the session's cluster, emptied, every master up and every slot served."""
    redis_cluster.wait_ok()
    redis_cluster.flushall()
    return redis_cluster


@pytest.fixture
def engine(cluster: RedisCluster) -> Iterator[Scripts]:
    """Return loaded engine scripts on a cluster client of the emptied cluster."""
    client = connect(Settings.from_env({"REDIS_URL": f"redis+cluster://{cluster.seeds}"}), role="t")
    scripts = Scripts(client, Keys())
    scripts.load()
    try:
        yield scripts
    finally:
        client.close()
