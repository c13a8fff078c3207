"""Concurrent POST /enqueue under real gunicorn, whose threads share Redis requests (group
commit, shared.engine.scripts.group_commit): every request answered with its own job, every
job in Redis with its own payload, and fewer requests reached Redis than enqueues were made.

The sharing itself, call by call: tests/engine/test_shared_requests.py."""

from __future__ import annotations

import http.client
import json
import threading
from typing import Any

import redis

from shared.engine.keys import Keys
from shared.engine.queries import get_job
from tests.support.gunicorn import Gunicorn

CLIENTS, EACH = 48, 25


def test_concurrent_enqueues_each_get_their_own_job_and_share_requests(
    gw: Gunicorn, r: redis.Redis
) -> None:
    answers: list[tuple[int, int, int, Any]] = []
    failed: list[BaseException] = []

    def produce(client: int) -> None:
        conn = http.client.HTTPConnection(gw.host, gw.port, timeout=30)
        try:
            for n in range(EACH):
                body = {"type": "send_email", "payload": {"client": client, "n": n}}
                conn.request(
                    "POST", "/enqueue", json.dumps(body), {"Content-Type": "application/json"}
                )
                reply = conn.getresponse()
                answers.append((client, n, reply.status, json.loads(reply.read())))
        except BaseException as err:  # raised below, in the test's thread
            failed.append(err)
        finally:
            conn.close()

    before = r.info("stats")["total_reads_processed"], _script_calls(r)
    threads = [threading.Thread(target=produce, args=(client,)) for client in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert not failed, failed[0]
    reads = r.info("stats")["total_reads_processed"] - before[0]
    calls = _script_calls(r) - before[1]

    assert len(answers) == CLIENTS * EACH
    assert {status for *_, status, _ in answers} == {201}
    ids = {doc["id"] for *_, doc in answers}
    assert len(ids) == CLIENTS * EACH  # no two requests answered with one job
    keys = Keys()
    for client, n, _, doc in answers:
        assert doc["payload"] == {"client": client, "n": n}  # its own job in its answer
        job = get_job(r, keys, doc["id"], ["default"])
        assert job is not None and job.payload == {"client": client, "n": n}
    # Each enqueue is one script call; shared requests carry several: Redis read fewer
    # requests than the calls it ran (this test's INFO calls among them).
    assert calls >= CLIENTS * EACH
    assert reads < calls, (reads, calls)


def _script_calls(r: redis.Redis) -> int:
    stats = r.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))
