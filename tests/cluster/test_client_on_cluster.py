"""The cluster client itself: built from redis+cluster://, named, bounded, checking every master."""

from __future__ import annotations

import os

from shared.connect.redis_conn import connect, is_cluster, like
from shared.engine.redis_checks import EVICTION, check_redis
from shared.settings.config import Settings
from tests.support.cluster import RedisCluster


def _settings(cluster: RedisCluster) -> Settings:
    return Settings.from_env({"REDIS_URL": f"redis+cluster://{cluster.seeds}"})


def test_connect_builds_a_named_cluster_client_from_any_seed(cluster: RedisCluster) -> None:
    # One seed is enough: the client asks it for the slot map and finds the other nodes.
    one_seed = Settings.from_env({"REDIS_URL": f"redis+cluster://{cluster.seeds.split(',')[-1]}"})
    client = connect(one_seed, role="named", max_connections=2, pool_wait=0.1)
    try:
        assert is_cluster(client)
        assert len(client.get_primaries()) == 3
        for master in cluster.masters():  # one connection to each master, each named
            client.set(f"{{k{master.port}}}", "1")
        names = set()
        for master in cluster.masters():
            direct = master.client()
            try:
                names |= {c["name"] for c in direct.client_list()}
            finally:
                direct.close()
        assert f"taskforge-named-{os.getpid()}" in names
        other = like(client, max_connections=1, socket_timeout=3)
        try:
            assert is_cluster(other) and other.ping()
        finally:
            other.close()
    finally:
        client.close()


def test_the_config_check_reads_every_master(cluster: RedisCluster) -> None:
    client = connect(_settings(cluster), role="check")
    master = cluster.masters()[2]
    direct = master.client()
    try:
        assert EVICTION not in check_redis(client).problems
        direct.config_set("maxmemory-policy", "allkeys-lru")
        found = check_redis(client)
        assert EVICTION in found.problems and found.maxmemory_policy == "allkeys-lru"
    finally:
        direct.config_set("maxmemory-policy", "noeviction")
        direct.close()
        client.close()


def test_the_durable_mode_is_accepted_on_a_cluster() -> None:
    env = {"REDIS_URL": "redis+cluster://127.0.0.1:7000", "TASKFORGE_WAIT_REPLICAS": "1"}
    assert Settings.from_env(env).wait_replicas == 1
