"""Durable mode switched on by environment in a real ``python -m workerd`` on a real primary and
replica: its completions count (in /metrics) only once a replica has them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import validate_enqueue
from tests.support.replicated import Replicated
from tests.support.tools import free_port, wait_until
from tests.support.workerd import Workerd, start_workerd, stop_all

K = Keys()
COMPLETED = ("taskforge_jobs_completed_total", (("queue", "default"), ("type", "demo.noop")))
UNCONFIRMED = ("taskforge_wait_replicas_timeouts_total", (("op", "complete"),))


@pytest.fixture
def workerd(pair: Replicated, tmp_path: Path) -> Iterator[Workerd]:
    env = {
        "REDIS_URL": pair.primary.url,
        "PORT_WORKER": str(free_port()),
        "TASKFORGE_BIND_HOST": "127.0.0.1",
        "WORKER_COUNT": "1",
        "TASKFORGE_HANDLERS": "workerd.demo",
        "TASKFORGE_WAIT_REPLICAS": "1",
        "TASKFORGE_WAIT_TIMEOUT": "300ms",
    }
    supervisor = start_workerd(env, tmp_path / "workerd.log", tmp_path / "workerd.err")
    try:
        yield supervisor
    finally:
        assert stop_all([supervisor]) == []


def scrape(workerd: Workerd) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, _, body = workerd.http("/metrics")
    assert status == 200
    found = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def status_of(client: redis.Redis, job_id: str) -> bytes | None:
    return client.hget(K.job(job_id), "status")


def test_workerd_counts_a_completion_once_a_replica_has_it(
    workerd: Workerd, pair: Replicated, primary: redis.Redis
) -> None:
    producer = Scripts(primary, K)  # durable mode is workerd's here, not the producer's
    producer.enqueue(validate_enqueue({"type": "demo.noop"}), "j-1")
    wait_until(lambda: scrape(workerd).get(COMPLETED) == 1.0, 10, "the first completion counted")
    assert status_of(primary, "j-1") == b"completed"

    pair.replica.freeze()
    producer.enqueue(validate_enqueue({"type": "demo.noop"}), "j-2")
    wait_until(lambda: scrape(workerd).get(UNCONFIRMED) == 1.0, 10, "an unconfirmed completion")
    assert status_of(primary, "j-2") == b"completed"  # done on the primary
    assert scrape(workerd).get(COMPLETED) == 1.0  # not counted: a failover may undo it
    line = workerd.wait_for("write_not_replicated", timeout=5)[-1]
    assert (line["job_id"], line["op"], line["outcome"]) == ("j-2", "complete", "completed")
    assert not workerd.events("job_completed", job_id="j-2")
