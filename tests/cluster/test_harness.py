"""The cluster harness itself: three masters own every slot, keys route, a master fails over."""

from __future__ import annotations

import pytest

from tests.support.cluster import RedisCluster, queue_names_on_distinct_masters, running_cluster
from tests.support.tools import require_tool


def test_three_masters_own_every_slot(cluster: RedisCluster) -> None:
    masters = cluster.masters()
    assert len(masters) == 3
    assert {cluster.replica_of(m).port for m in masters}.isdisjoint({m.port for m in masters})


def test_a_key_lives_on_the_master_that_owns_its_slot(cluster: RedisCluster) -> None:
    client = cluster.client()
    try:
        for name in queue_names_on_distinct_masters(cluster):
            key = f"{{taskforge:{name}}}:v2:seq"
            client.set(key, "1")
            owner = cluster.master_of(key)
            direct = owner.client()
            try:
                assert direct.get(key) == b"1"  # no MOVED: it lives there
            finally:
                direct.close()
    finally:
        client.close()


@pytest.mark.slow
def test_a_killed_master_is_replaced_by_its_replica() -> None:
    # A cluster of its own: the session's keeps its three original masters for the other tests.
    with running_cluster(require_tool("redis-server"), require_tool("redis-cli")) as own:
        master = own.master_of("{taskforge:default}")
        replica = own.kill_master(master)
        own.wait_promoted(replica)
        assert own.master_of("{taskforge:default}").port == replica.port
        client = own.client()
        try:
            client.set("{taskforge:default}:after", "ok")
            assert client.get("{taskforge:default}:after") == b"ok"
        finally:
            client.close()
