"""Pipelined scripts go to their keys' master only, on a real cluster (shared.connect.cluster_routing).

redis-py's cluster pipeline asks its default node for the keys of each EVALSHA (COMMAND
GETKEYS) unless told how to route it: with that node's master down, a listing of a queue on a
live master failed (scenario 17 kills one; this checks the routing whichever node is default).
"""

from __future__ import annotations

from shared.connect.redis_conn import connect
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState
from shared.read import listing
from shared.settings.config import Settings
from tests.support.cluster import RedisCluster, queue_names_on_distinct_masters


def getkeys_calls(cluster: RedisCluster) -> dict[int, int]:
    """Return how many COMMAND GETKEYS each master has served."""
    counts = {}
    for master in cluster.masters():
        client = master.client()
        try:
            stats = client.info("commandstats")
        finally:
            client.close()
        counts[master.port] = int(stats.get("cmdstat_command|getkeys", {}).get("calls", 0))
    return counts


def test_a_pipelined_script_asks_no_node_for_its_keys(cluster: RedisCluster) -> None:
    settings = Settings.from_env({"REDIS_URL": f"redis+cluster://{cluster.seeds}"})
    client = connect(settings, role="routing")
    try:
        scripts = Scripts(client)
        default = client.get_default_node()  # type: ignore[attr-defined]
        queue = next(
            q
            for q in queue_names_on_distinct_masters(cluster, 3)
            if cluster.master_of(f"{{taskforge:{q}}}").port != default.port
        )
        before = getkeys_calls(cluster)
        page = listing.list_jobs(scripts, JobState.PENDING, [queue])
        assert page.jobs == []
        assert getkeys_calls(cluster) == before
    finally:
        client.close()
