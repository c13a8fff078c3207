"""The scheduler on a Redis Cluster: the due index (global slot) beside queues on other masters.

No script may write the global slot and a queue's: a delayed enqueue notes its queue in a
call of its own, the scheduler settles an entry with a ZREM, a read of the queue's master and
a ZADD LT, and the sweep walks the list of queues. Each step here crosses masters.
"""

from __future__ import annotations

import os
import uuid

import pytest

from shared.connect.redis_conn import connect
from shared.engine.keys import Keys
from shared.engine.queries import get_job
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, validate_enqueue
from shared.settings.config import Settings
from tests.fakes import IdleSlot
from tests.support.cluster import RedisCluster, queue_names_on_distinct_masters
from workerd.scheduler import RECOVER_INTERVAL, SchedulerProcess

T0 = 1_796_000_000_000
K = Keys()


@pytest.fixture
def scripts(cluster: RedisCluster) -> Scripts:
    settings = Settings.from_env({"REDIS_URL": f"redis+cluster://{cluster.seeds}"})
    engine = Scripts(connect(settings, role="scheduler"), K)
    engine.load()
    return engine


def _status(scripts: Scripts, job_id: str, queue: str) -> JobState:
    job = get_job(scripts.redis, K, job_id, [queue])
    assert job is not None
    return job.status


def test_delayed_jobs_on_three_masters_are_indexed_promoted_and_settled(
    cluster: RedisCluster, scripts: Scripts
) -> None:
    queues = queue_names_on_distinct_masters(cluster)
    jobs = {}
    for n, queue in enumerate(queues):
        scripts.register_queue(queue)
        body = validate_enqueue({"type": "t", "queue": queue, "delay": f"{10 * (n + 1)}ms"})
        jobs[queue] = str(uuid.uuid4())
        scripts.enqueue(body, jobs[queue], now_ms=T0)
        later = validate_enqueue({"type": "t", "queue": queue, "delay": "1h"})
        scripts.enqueue(later, str(uuid.uuid4()), now_ms=T0)
    assert scripts.redis.zscore(K.due, queues[2]) == T0 + 30
    scheduler = SchedulerProcess(scripts, IdleSlot(), os.getppid(), reconnect_grace=0)

    scheduler.step(0.0, now_ms=T0 + 100)

    for queue in queues:
        assert _status(scripts, jobs[queue], queue) is JobState.PENDING
        assert scripts.redis.zscore(K.due, queue) == T0 + 3_600_000  # the next job's time


def test_the_sweep_repairs_a_lost_entry_and_a_dead_host_s_lease_is_recovered(
    cluster: RedisCluster, scripts: Scripts
) -> None:
    delayed, leased = queue_names_on_distinct_masters(cluster)[:2]
    scripts.register_queue(delayed)
    scheduled = str(uuid.uuid4())
    body = validate_enqueue({"type": "t", "queue": delayed, "delay": "10ms"})
    scripts.enqueue(body, scheduled, now_ms=T0)
    scripts.redis.zrem(K.due, delayed)  # the producer died before its note
    scripts.register_queue(leased)
    running = str(uuid.uuid4())
    scripts.enqueue(validate_enqueue({"type": "t", "queue": leased}), running, now_ms=T0)
    assert scripts.claim("w", queue=leased, now_ms=T0) is not None  # its host is gone
    scheduler = SchedulerProcess(scripts, IdleSlot(), os.getppid(), reconnect_grace=0)
    later = T0 + scripts.policy.lease_ms + 1_000

    scheduler.step(0.0, now_ms=later)  # the sweep: the entry back, the queue adopted
    scheduler.step(RECOVER_INTERVAL, now_ms=later)

    assert _status(scripts, scheduled, delayed) is JobState.PENDING
    assert _status(scripts, running, leased) is JobState.PENDING
