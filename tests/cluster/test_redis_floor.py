"""The oldest redis-py requirements.txt allows still routes pipelined scripts by their keys.

shared/connect/cluster_routing.py builds on redis-py's command policies (redis.commands.policies),
which only exist from 7.1: with an older client the server would not even import. This runs
the routing check of test_cluster_routing.py under the floor version, installed (from the
package index) into a directory that shadows the venv's newer redis-py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.test_cluster_routing import getkeys_calls
from tests.support.cluster import RedisCluster, queue_names_on_distinct_masters
from tests.support.tools import ROOT

INSTALL_TIMEOUT = 180.0  # seconds for pip to fetch one pure-Python wheel
RUN_TIMEOUT = 60.0

# Connects as the server does and lists each queue (one pipelined script per queue).
LIST_QUEUES = """
import sys
import redis
from shared.read import listing
from shared.settings.config import Settings
from shared.model.jobs import JobState
from shared.connect.redis_conn import connect
from shared.engine.scripts import Scripts

print(redis.__version__)
client = connect(Settings.from_env({"REDIS_URL": f"redis+cluster://{sys.argv[1]}"}), role="floor")
for queue in sys.argv[2:]:
    assert listing.list_jobs(Scripts(client), JobState.PENDING, [queue]).jobs == []
client.close()
"""


def redis_floor() -> str:
    requirements = (ROOT / "requirements.txt").read_text()
    match = re.search(r"^redis\[hiredis\]>=([0-9.]+),", requirements, re.MULTILINE)
    assert match, "requirements.txt names redis[hiredis] with a lower bound"
    return match.group(1)


@pytest.mark.slow
def test_the_floor_redis_py_routes_pipelined_scripts_by_their_keys(
    cluster: RedisCluster, tmp_path: Path
) -> None:
    floor = redis_floor()
    target = tmp_path / "floor"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "--no-deps", "--target", str(target), f"redis=={floor}"],
        check=True,
        timeout=INSTALL_TIMEOUT,
    )  # fmt: skip
    queues = queue_names_on_distinct_masters(cluster, 3)
    before = getkeys_calls(cluster)
    result = subprocess.run(
        [sys.executable, "-c", LIST_QUEUES, cluster.seeds, *queues],
        cwd=ROOT,
        env={"PYTHONPATH": f"{target}:{ROOT}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    # The version the program ran with, so a shadowing that failed cannot pass for the floor.
    assert result.stdout.split()[0] == floor
    assert getkeys_calls(cluster) == before
