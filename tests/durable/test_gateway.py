"""Durable mode through the real gateway (gunicorn, deploy/gunicorn.conf.py) on a real primary
and replica: 2xx only once a replica has the job; 503 not_replicated, at once and without a
second job on a resend, while none confirms it."""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from shared.engine.keys import Keys
from taskforge import Client, Unavailable, new_job_id
from tests.cli.conftest import invoke
from tests.support.gunicorn import Gunicorn, run_gunicorn
from tests.support.replicated import Replicated
from tests.support.tools import wait_until

K = Keys()
TIMEOUT = 0.3  # TASKFORGE_WAIT_TIMEOUT
LATE = 1.0  # the 503 comes at most this long after the timeout (two gunicorn workers, loaded CI)
SECRET = "payload-secret-91c2"


@pytest.fixture(scope="module")
def durable_gateway(
    replicated: Replicated, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gunicorn]:
    """Run a gateway with TASKFORGE_WAIT_REPLICAS=1 on the primary."""
    tmp = tmp_path_factory.mktemp("durable-gunicorn")
    env = {"TASKFORGE_WAIT_REPLICAS": "1", "TASKFORGE_WAIT_TIMEOUT": f"{TIMEOUT}s"}
    with run_gunicorn(replicated.primary.url, tmp, **env) as server:
        yield server


@pytest.fixture
def gw(durable_gateway: Gunicorn, pair: Replicated) -> Gunicorn:
    return durable_gateway


def job_keys(client: redis.Redis) -> list[bytes]:
    return sorted(client.scan_iter(match=K.job("*")))


def post(gw: Gunicorn, path: str, body: dict[str, Any], key: str | None = None) -> Any:
    headers = {"Idempotency-Key": key} if key else {}
    started = time.monotonic()
    status, headers_back, doc = gw.request("POST", path, body, headers)
    return status, headers_back, doc, time.monotonic() - started


def test_an_enqueue_is_answered_once_the_replica_has_it(gw: Gunicorn, replica: redis.Redis) -> None:
    status, _, doc, _ = post(gw, "/enqueue", {"type": "t", "payload": {"s": SECRET}})
    # Read at once: the 201 left the gateway after WAIT confirmed the replica had the job.
    on_replica = replica.hget(K.job(doc["id"]), "status")
    assert status == 201 and on_replica == b"pending"
    status, _, doc, _ = post(gw, "/enqueue/batch", {"jobs": [{"type": "t"}, {"type": "u"}]})
    on_replica = [replica.hget(K.job(job["id"]), "status") for job in doc["jobs"]]
    assert status == 201 and on_replica == [b"pending", b"pending"]


def test_an_unconfirmed_enqueue_is_a_503_and_a_resend_makes_no_second_job(
    gw: Gunicorn, pair: Replicated, primary: redis.Redis, replica: redis.Redis
) -> None:
    body = {"type": "t", "payload": {"s": SECRET}}
    pair.replica.freeze()
    status, headers, doc, took = post(gw, "/enqueue", body, key="order-1")
    assert status == 503 and headers["retry-after"] == "1"
    assert (doc["code"], doc["replicas"], doc["wanted"]) == ("not_replicated", 0, 1)
    assert "resend with the same Idempotency-Key" in doc["error"]
    assert TIMEOUT * 0.9 <= took < TIMEOUT + LATE
    job_id = doc["job_id"]
    assert job_keys(primary) == [K.job(job_id).encode()]  # on the primary, once

    status, _, again, took = post(gw, "/enqueue", body, key="order-1")
    assert (status, again["code"], again["job_id"]) == (503, "not_replicated", job_id)
    assert took < TIMEOUT + LATE
    assert job_keys(primary) == [K.job(job_id).encode()]

    pair.replica.thaw()
    status, _, confirmed, _ = post(gw, "/enqueue", body, key="order-1")
    assert (status, confirmed["id"]) == (200, job_id)
    assert replica.hget(K.job(job_id), "status") == b"pending"
    assert job_keys(primary) == [K.job(job_id).encode()]
    lines = [line for line in gw.log_lines() if line.get("event") == "write_not_replicated"]
    assert [(line["op"], line["job_id"]) for line in lines[-2:]] == [("enqueue", job_id)] * 2
    assert SECRET not in gw.log_path.read_text()


def test_an_unconfirmed_batch_is_a_503_naming_its_jobs(
    gw: Gunicorn, pair: Replicated, primary: redis.Redis
) -> None:
    batch = {"jobs": [{"type": "t"}, {"type": "u", "queue": "other"}]}
    pair.replica.freeze()
    status, _, doc, took = post(gw, "/enqueue/batch", batch, key="batch-1")
    assert (status, doc["code"], len(doc["job_ids"])) == (503, "not_replicated", 2)
    assert took < TIMEOUT + LATE
    pair.replica.thaw()
    status, _, again, _ = post(gw, "/enqueue/batch", batch, key="batch-1")
    assert status == 200 and [job["id"] for job in again["jobs"]] == doc["job_ids"]
    assert len(job_keys(primary)) == 1 and len(list(primary.scan_iter(match="*other*:job:*"))) == 1


def test_an_unconfirmed_enqueue_without_a_key_is_not_told_to_resend(
    gw: Gunicorn, pair: Replicated, primary: redis.Redis
) -> None:
    """Without an Idempotency-Key a resend would make a second job: the 503 says to look the
    job up by id instead of resending (and to send a key next time)."""
    pair.replica.freeze()
    status, _, doc, _ = post(gw, "/enqueue", {"type": "t"})
    assert (status, doc["code"]) == (503, "not_replicated")
    assert "resend with the same" not in doc["error"]
    assert "no Idempotency-Key" in doc["error"] and "GET /jobs/<id>" in doc["error"]
    assert job_keys(primary) == [K.job(doc["job_id"]).encode()]
    status, _, doc, _ = post(gw, "/enqueue/batch", {"jobs": [{"type": "t"}, {"type": "u"}]})
    assert (status, len(doc["job_ids"])) == (503, 2)
    assert "no Idempotency-Key" in doc["error"] and "check them" in doc["error"]


def test_off_the_gateway_sends_no_wait(
    pair: Replicated, primary: redis.Redis, tmp_path: Path
) -> None:
    """TASKFORGE_WAIT_REPLICAS unset: a frozen replica changes nothing, and no WAIT is sent."""
    with run_gunicorn(pair.primary.url, tmp_path) as plain:
        pair.replica.freeze()
        primary.config_resetstat()
        status, _, _, took = post(plain, "/enqueue", {"type": "t"})
        stats = primary.info("commandstats")
    assert status == 201 and took < TIMEOUT
    assert "cmdstat_wait" not in stats and "cmdstat_publish" not in stats


def test_the_python_client_resends_a_not_replicated_enqueue_with_its_key(
    gw: Gunicorn, pair: Replicated, primary: redis.Redis
) -> None:
    """taskforge.Client retries a 503 with the same Idempotency-Key: while the replica is
    down every try is refused (one job on the primary, not two), and once it is back the same
    call gets that job."""
    with Client(gw.url, retries=2, backoff=0.05, max_backoff=0.1) as client:
        pair.replica.freeze()
        with pytest.raises(Unavailable):
            client.enqueue("t", {"n": 1}, idempotency_key="order-9")
        assert len(job_keys(primary)) == 1
        pair.replica.thaw()
        job = client.enqueue("t", {"n": 1}, idempotency_key="order-9")
    assert job_keys(primary) == [K.job(job.id).encode()]


def test_the_python_client_resends_a_not_replicated_enqueue_with_its_id(
    gw: Gunicorn, pair: Replicated, primary: redis.Redis
) -> None:
    """An enqueue that names its job (the client's own id, no Idempotency-Key) is told to
    resend the same body, and a resend makes no second job: one on the primary throughout."""
    mine = new_job_id()
    pair.replica.freeze()
    status, _, doc, _ = post(gw, "/enqueue", {"type": "t", "id": mine})
    assert (status, doc["code"], doc["job_id"]) == (503, "not_replicated", mine)
    assert "resend the same body (the same id)" in doc["error"]
    with Client(gw.url, retries=1, backoff=0.05, max_backoff=0.1) as client:
        with pytest.raises(Unavailable):
            client.enqueue("t", id=mine)
        assert job_keys(primary) == [K.job(mine).encode()]
        pair.replica.thaw()
        assert client.enqueue("t", id=mine).id == mine
    assert job_keys(primary) == [K.job(mine).encode()]


def test_ready_stays_200_and_says_how_many_replicas_are_connected_of_those_wanted(
    gw: Gunicorn, pair: Replicated, primary: redis.Redis
) -> None:
    status, _, doc = gw.request("GET", "/ready")
    assert status == 200 and doc["replicas"] == {"connected": 1, "wanted": 1}, doc
    # The replica gone from the primary's list: every enqueue would be not_replicated now,
    # and /ready says so while it stays 200 (reads, cancels and the dashboard still work).
    pair.replica.freeze()
    assert primary.client_kill_filter(_type="replica") == 1
    wait_until(lambda: primary.info("replication")["connected_slaves"] == 0, 5, "the drop")
    status, _, doc = gw.request("GET", "/ready")
    assert status == 200 and doc["replicas"] == {"connected": 0, "wanted": 1}, doc
    pair.replica.thaw()


def test_the_cli_names_the_unconfirmed_job_its_key_and_the_command_that_confirms_it(
    gw: Gunicorn, pair: Replicated, primary: redis.Redis
) -> None:
    pair.replica.freeze()
    base = ("--url", gw.url, "--retries", "1")
    sent = invoke(*base, "enqueue", "t", "-", "--priority", "5", input='{"n": 1}')
    line = sent.error_line()
    assert sent.code == 3, line
    found = re.search(r"job (\S+) is on the primary, but only 0 of 1 replicas", line)
    assert found, line
    job_id = found[1]
    key = re.search(r"\(idempotency key (tf-[0-9a-f]{32})\)", line)
    assert key, line
    command = line.split("without a second job: ", 1)[1]
    assert command == (f"taskforge enqueue t '{{\"n\":1}}' --priority 5 --idempotency-key {key[1]}")
    assert job_keys(primary) == [K.job(job_id).encode()]
    pair.replica.thaw()
    argv = shlex.split(command)
    assert argv[0] == "taskforge"
    again = invoke(*base, *argv[1:])  # the advice, followed word for word
    assert (again.code, again.out.strip()) == (0, job_id), again
    assert job_keys(primary) == [K.job(job_id).encode()]  # confirmed, not made twice
