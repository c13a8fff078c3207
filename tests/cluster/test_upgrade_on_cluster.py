"""The v1 -> v2 upgrade on a real cluster: v1's keys share one slot, v2 spreads them by queue."""

from __future__ import annotations

from shared.config import Settings
from shared.keys import Keys
from shared.redis_conn import connect
from shared.upgrade import Upgrade
from tests.support.cluster import RedisCluster
from tests.upgrade.conftest import NOW, POLICY, V1K, seed, v1_job_keys
from tests.upgrade.v1 import V1


def test_the_upgrade_moves_every_v1_job_on_a_cluster(cluster: RedisCluster) -> None:
    settings = Settings.from_env({"REDIS_URL": f"redis+cluster://{cluster.seeds}"})
    client = connect(settings, role="upgrade-test")
    try:
        world = seed(V1(client, V1K, POLICY), running=False)
        upgrade = Upgrade(client, Keys(), wake_cap=POLICY.wake_cap)
        moved = upgrade.run(now_ms=NOW)
        assert moved.total == len(world.every()), moved
        assert v1_job_keys(client) == []  # SCAN over every master: nothing of v1 is left
        for jid in world.every():
            assert client.exists(Keys().job(jid)), jid
        # the v1 idempotency key was moved to the global slot
        assert client.hget(Keys().idempotency("order-1"), "job_id") is not None
    finally:
        client.close()
