"""The client over a faulty network (tests/support/tcp_proxy.py between it and the real
gateway): lost replies, refused connections, typed errors, and one client shared by threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import redis

from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.job_ids import client_id_problem
from taskforge import (
    BadRequest,
    Client,
    Conflict,
    JobSpec,
    NotFound,
    Unauthorized,
    Unavailable,
    new_job_id,
)
from tests.support.engine_jobs import complete, fresh_queue
from tests.support.gunicorn import Gunicorn
from tests.support.tcp_proxy import TcpProxy
from tests.support.tools import free_port, wait_until

QUICK = {"timeout": 5.0, "retries": 2, "backoff": 0.01, "max_backoff": 0.05}


@pytest.fixture
def proxy(gw: Gunicorn) -> Iterator[TcpProxy]:
    """Return a fault-injecting proxy in front of the real gateway."""
    with TcpProxy(gw.host, gw.port) as running:
        yield running


@pytest.fixture
def via_proxy(proxy: TcpProxy) -> Iterator[Client]:
    """Return a client that reaches the gateway through the proxy."""
    with Client(f"http://{proxy.host}:{proxy.port}", "", **QUICK) as client:
        yield client


def enqueue_statuses(gw: Gunicorn, start: int, path: str = "/enqueue") -> list[int]:
    """Return the statuses the gateway logged for POST `path` after log line `start`."""
    lines = gw.log_lines()[start:]
    return [
        line["status"]
        for line in lines
        if line.get("event") == "http_request" and line.get("path") == path
    ]


def test_a_lost_enqueue_reply_is_retried_with_the_same_id_and_makes_one_job(
    gw: Gunicorn, tf: Client, proxy: TcpProxy, via_proxy: Client
) -> None:
    queue = fresh_queue()
    logged = len(gw.log_lines())
    lost = proxy.drop_next_reply(b"POST /enqueue ")

    job = via_proxy.enqueue("send_email", {"to": "a@example.com"}, queue=queue)

    assert lost.is_set(), "the first try reached the gateway and its reply was lost"
    # The first try made the job (201, reply lost); the retry carried the same job id
    # (the client's, in the body) and was answered with that job (200), not a second one.
    # The request line is logged after the reply is written: wait for the second one.
    statuses = wait_until(
        lambda: [found for found in [enqueue_statuses(gw, logged)] if len(found) >= 2],
        5.0,
        "both enqueue tries in the gateway's log",
    )[0]
    assert statuses == [201, 200]
    pending = tf.list("pending", queue=queue).jobs
    assert [j.id for j in pending] == [job.id]
    assert tf.stats().queues[queue]["total"] == 1


def test_a_lost_batch_reply_is_retried_with_the_same_ids_and_makes_each_job_once(
    gw: Gunicorn, r: redis.Redis, tf: Client, proxy: TcpProxy, via_proxy: Client
) -> None:
    queue = fresh_queue()
    logged = len(gw.log_lines())
    lost = proxy.drop_next_reply(b"POST /enqueue/batch")

    created = via_proxy.enqueue_many([JobSpec("t", {"i": i}, queue=queue) for i in range(3)])

    assert lost.is_set(), "the first try reached the gateway and its reply was lost"
    # The first try made the jobs (201, reply lost); the retry carried the same ids and was
    # answered with those jobs (200). Logged after each reply is written: wait for both.
    statuses = wait_until(
        lambda: [s for s in [enqueue_statuses(gw, logged, "/enqueue/batch")] if len(s) >= 2],
        5.0,
        "both batch tries in the gateway's log",
    )[0]
    assert statuses == [201, 200]
    assert [job.payload["i"] for job in created] == [0, 1, 2]
    listed = [job.id for job in tf.list("pending", queue=queue).jobs]
    assert listed == [job.id for job in created]
    # Each job once in Redis: no hash beside the three the listing shows.
    stored = r.keys(Keys(queue=queue).job("*"))
    assert sorted(key.decode().rsplit(":", 1)[1] for key in stored) == sorted(listed)


def test_a_refused_connection_is_retried_then_unavailable() -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    with Client(closed, "", timeout=1.0, retries=2, backoff=0.01, max_backoff=0.02) as client:
        with pytest.raises(Unavailable, match="tried 3 times") as raised:
            client.get("0b1f3c0e-6f2c-4c35-9a39-3b8f7e1e2a11")
        assert "refused" in str(raised.value).lower()
        # A batch is retried too when the connection was refused: it cannot have arrived.
        with pytest.raises(Unavailable, match="tried 3 times") as raised:
            client.enqueue_many([JobSpec("t")])
        assert not raised.value.outcome_unknown


def test_an_enqueue_names_its_job_and_leaves_no_idempotency_key_in_redis(
    r: redis.Redis, tf: Client
) -> None:
    queue = fresh_queue()
    job = tf.enqueue("t", {"n": 1}, queue=queue)
    batch = tf.enqueue_many([JobSpec("t", {"i": i}, queue=queue) for i in range(2)])

    assert all(client_id_problem(j.id, queue) is None for j in [job, *batch])  # version 8
    assert r.keys(Keys().idempotency("*")) == []
    # An id of the caller's own: the same call again is the same job.
    mine = new_job_id(queue)
    assert (
        tf.enqueue("t", queue=queue, id=mine).id == mine == tf.enqueue("t", queue=queue, id=mine).id
    )
    with pytest.raises(Conflict, match="different body") as conflict:
        tf.enqueue("u", queue=queue, id=mine)
    assert conflict.value.status == 409
    assert tf.stats().queues[queue]["total"] == 4


def test_an_enqueue_is_not_tried_again_past_its_window(monkeypatch: pytest.MonkeyPatch) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setattr("taskforge.client.ENQUEUE_RETRY_WINDOW", 0.05)
    client = Client(closed, "", timeout=1.0, retries=50, backoff=0.02, max_backoff=0.02)
    with client, pytest.raises(Unavailable, match=r"in 0\.05 s") as raised:
        client.enqueue("t")
    assert raised.value.outcome_unknown  # a try may have arrived: resend with the same id
    assert "tried 50" not in str(raised.value)


def test_errors_carry_the_servers_message(tf: Client, engine: Scripts) -> None:
    with pytest.raises(NotFound, match="job not found") as missing:
        tf.get("0b1f3c0e-6f2c-4c35-9a39-3b8f7e1e2a11")
    assert missing.value.status == 404
    with pytest.raises(BadRequest, match="malformed job id"):
        tf.get("nope")
    with pytest.raises(BadRequest) as bad:
        tf.enqueue("t", priority=2**40)
    assert bad.value.status == 400 and [f["field"] for f in bad.value.fields] == ["priority"]
    tf.enqueue("t", {"n": 1}, idempotency_key="k")
    with pytest.raises(Conflict, match="Idempotency-Key"):
        tf.enqueue("t", {"n": 2}, idempotency_key="k")
    queue = fresh_queue()
    done = tf.enqueue("t", queue=queue)
    complete(engine, queue, done.id)
    with pytest.raises(Conflict) as conflict:
        tf.cancel(done.id)
    assert conflict.value.status == 409 and "completed" in conflict.value.message


def test_a_wrong_token_is_unauthorized(start_gateway: object, r: object) -> None:
    with start_gateway(TASKFORGE_API_TOKEN="right-token") as guarded:  # type: ignore[operator]
        with (
            Client(guarded.url, "wrong-token", **QUICK) as client,
            pytest.raises(Unauthorized) as raised,
        ):
            client.stats()
        assert raised.value.status == 401
        with Client(guarded.url, "right-token", **QUICK) as client:
            assert client.stats().total == 0


def test_threads_sharing_one_client_make_distinct_jobs_on_at_most_pool_size_connections(
    tf: Client, proxy: TcpProxy
) -> None:
    queue, pool_size, threads, each = fresh_queue(), 4, 8, 50
    made: list[list[str]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []
    url = f"http://{proxy.host}:{proxy.port}"
    with Client(url, "", pool_size=pool_size, **QUICK) as shared:

        def produce(index: int) -> None:
            try:
                for n in range(each):
                    made[index].append(shared.enqueue("t", {"n": n}, queue=queue).id)
            except BaseException as exc:  # reported by the test below
                errors.append(exc)

        workers = [threading.Thread(target=produce, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        assert not any(worker.is_alive() for worker in workers)
    assert errors == []
    ids = [job_id for batch in made for job_id in batch]
    assert len(ids) == len(set(ids)) == threads * each
    assert tf.stats().queues[queue]["jobs"]["pending"] == threads * each
    assert 1 <= proxy.peak_connections <= pool_size
