"""GET /stats/throughput under real gunicorn on the private Redis: the dashboard's chart data."""

from __future__ import annotations

import uuid

import pytest
import redis

from shared.engine.engine_types import Code
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.job_ids import new_job_id
from shared.model.jobs import validate_enqueue
from shared.read.directory import QueueDirectory
from tests.support.gunicorn import Gunicorn

K = Keys()


@pytest.fixture
def engine(r: redis.Redis) -> Scripts:
    """Return engine scripts on the private server (emptied by `r`)."""
    return Scripts(r, K)


def run(scripts: Scripts, queue: str, *, fail: bool = False) -> None:
    """Enqueue one job into `queue` and complete it (or fail it for good), on Redis's clock."""
    QueueDirectory(scripts).ensure(queue)
    job_id = new_job_id(queue)
    request = validate_enqueue({"type": "t", "queue": queue, "max_retries": 1})
    assert scripts.enqueue(request, job_id).created
    job = scripts.claim("w-test", queue=queue)
    assert job is not None and job.id == job_id
    if fail:
        assert scripts.fail(job_id, job.token, "E: boom", queue=queue).code is Code.DEAD
    else:
        assert scripts.complete(job_id, job.token, queue=queue).code is Code.DONE


def test_throughput_counts_each_queue_and_all_of_them_live(gw: Gunicorn, engine: Scripts) -> None:
    alpha, beta = f"alpha-{uuid.uuid4().hex[:6]}", f"beta-{uuid.uuid4().hex[:6]}"
    for _ in range(3):
        run(engine, alpha)
    run(engine, alpha, fail=True)
    run(engine, beta)

    code, _, one = gw.request("GET", f"/stats/throughput?queue={alpha}")
    _, _, every = gw.request("GET", "/stats/throughput")
    engine.trim(queue=alpha)  # the scheduler's roll-up changes nothing the reader sees
    _, _, after_trim = gw.request("GET", f"/stats/throughput?queue={alpha}&minutes=5")

    assert code == 200
    assert (one["queue"], one["completed"], one["failed"]) == (alpha, 3, 1)
    assert len(one["minutes"]) == 60 and one["minutes"][-1]["start"].endswith(":00.000Z")
    assert sum(m["completed"] for m in one["minutes"][-2:]) == 3  # this minute (or the last)
    assert (every["queue"], every["completed"], every["failed"]) == (None, 4, 1)
    assert every["every_queue"] is True  # few queues: each one read
    assert len(after_trim["minutes"]) == 5 and after_trim["completed"] == 3


@pytest.mark.parametrize(
    "query", ["minutes=0", "minutes=61", "minutes=x", "queue=bad!", "minutes=5&minutes=6"]
)
def test_a_bad_throughput_query_is_400_naming_it(gw: Gunicorn, query: str) -> None:
    code, _, doc = gw.request("GET", f"/stats/throughput?{query}")

    assert code == 400 and doc["fields"][0]["field"] == query.split("=")[0]
