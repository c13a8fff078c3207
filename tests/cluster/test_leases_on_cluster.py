"""Lease renewal on a cluster whose master died: the other masters' queues are still renewed."""

from __future__ import annotations

import uuid

import pytest

from shared.connect.redis_conn import connect
from shared.engine.engine_types import Code
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import validate_enqueue
from shared.settings.config import Settings
from tests.support.cluster import queue_names_on_distinct_masters, running_cluster
from tests.support.tools import require_tool
from workerd.duties.leases import Leases

pytestmark = pytest.mark.slow  # a cluster of its own, one master killed


def test_a_dead_master_skips_only_its_queue_s_renewals() -> None:
    with running_cluster(require_tool("redis-server"), require_tool("redis-cli")) as cluster:
        settings = Settings.from_env({"REDIS_URL": f"redis+cluster://{cluster.seeds}"})
        scripts = Scripts(connect(settings, role="leases"), Keys())
        queues = queue_names_on_distinct_masters(cluster)
        running = []
        for queue in queues:
            scripts.enqueue(validate_enqueue({"type": "t", "queue": queue}), str(uuid.uuid4()))
            job = scripts.claim("w", queue=queue)
            assert job is not None and job.token is not None
            running.append((None, 0, job.id, job.token, queue))  # (child, slot, id, token, queue)
        leases = Leases(None, scripts, interval=1.0, redis_url="test")  # type: ignore[arg-type]
        codes, error = leases._renew(running)  # type: ignore[arg-type]
        assert error is None and set(codes.values()) == {Code.DONE}, codes
        cluster.kill_master(cluster.master_of(f"{{taskforge:{queues[0]}}}"))
        codes, error = leases._renew(running)  # type: ignore[arg-type]
        assert error is not None  # the dead master's queue: not renewed this time
        assert set(codes) == {job_id for _, _, job_id, _, queue in running if queue != queues[0]}
        assert set(codes.values()) == {Code.DONE}, codes
