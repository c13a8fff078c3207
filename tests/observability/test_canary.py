"""No payload reaches a log line: a secret-looking canary through success, failure and the DLQ.

How error text is recorded: a handler's exception becomes ``"TypeName: message"`` cut to
shared.obs.log.ERROR_TEXT_LIMIT (500) characters, stored only in the job's Redis hash
(``last_error``, the job owner's own data, readable through GET /jobs/<id> and /dlq), and so is
its traceback (``traceback``, capped at shared.model.jobs.TRACEBACK_LIMIT, 8 KiB), whose last line
repeats the message. Log lines carry only the exception's type (``"error": "RuntimeError"``),
because a message can echo the payload — as the ``demo.fail`` handler here does on purpose.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis

from tests.observability.conftest import PREFIX, poll
from tests.support.gunicorn import Gunicorn
from tests.support.workerd import Workerd

WAIT = 15.0


def _enqueue(gw: Gunicorn, body: dict[str, Any]) -> str:
    status, _, doc = gw.request("POST", "/enqueue", body)
    assert status == 201, doc
    return doc["id"]


def _wait_status(gw: Gunicorn, job_id: str, status: str) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        doc = gw.request("GET", f"/jobs/{job_id}")[2]
        return doc if doc["status"] == status else None

    return poll(reached, WAIT, f"job {job_id} to be {status}")


@pytest.mark.slow
def test_a_canary_in_payloads_and_error_messages_appears_in_no_log_line(
    r: redis.Redis,
    start_workerd: Callable[..., Workerd],
    start_gateway: Callable[..., contextlib.AbstractContextManager[Gunicorn]],
) -> None:
    canary = f"sk_live_CANARY{uuid.uuid4().hex}"
    workerd = start_workerd(WORKER_COUNT="2", LOG_LEVEL="DEBUG")
    with start_gateway(LOG_LEVEL="DEBUG") as gw:
        ok = _enqueue(gw, {"type": "demo.noop", "payload": {"api_key": canary}})
        batch_status, _, batch = gw.request(
            "POST",
            "/enqueue/batch",
            {"jobs": [{"type": "demo.noop", "payload": {"keys": [canary]}}]},
        )
        assert batch_status == 201, batch
        # Fails with the canary in its message: retried, then dead.
        echoed = _enqueue(gw, {"type": "demo.fail", "payload": {"error": canary}, "max_retries": 2})
        permanent = _enqueue(gw, {"type": "permanent", "payload": {"error": f"bad {canary}"}})
        scheduled = _enqueue(
            gw,
            {"type": "demo.noop", "payload": {"k": canary}, "scheduled_at": "2099-01-01T00:00:00Z"},
        )
        # A refused body that holds the canary: the 400 may echo it to the client, not to logs.
        status, _, _ = gw.request("POST", "/enqueue", {"type": "demo.noop", "bogus": canary})
        assert status == 400

        _wait_status(gw, ok, "completed")
        _wait_status(gw, batch["jobs"][0]["id"], "completed")
        dead = _wait_status(gw, echoed, "dead")
        _wait_status(gw, permanent, "dead")
        # The message is the job owner's data: kept, capped, in Redis only.
        assert canary in dead["last_error"] and dead["last_error"].startswith("RuntimeError: ")
        assert len(r.hget(f"{PREFIX}job:{echoed}", "last_error")) <= 500
        # The traceback too: the handler's frame, and the message (with the canary) at its end.
        assert ", in fail\n" in dead["traceback"]
        assert dead["traceback"].endswith(f"RuntimeError: {canary}\n")

        # Through the DLQ: replay (it fails again and dies again), then purge.
        status, _, _ = gw.request("POST", f"/dlq/{echoed}/retry")
        assert status == 200
        workerd.wait_for("job_dead", job_id=echoed, count=2, timeout=WAIT)
        _wait_status(gw, echoed, "dead")
        status, _, _ = gw.request("DELETE", f"/dlq/{permanent}")
        assert status == 204
        status, _, _ = gw.request("POST", f"/jobs/{scheduled}/cancel")
        assert status == 200
        status, _, listing = gw.request("GET", "/dlq")
        assert status == 200 and canary in str(listing)  # the API still serves the owner
        [listed] = [job for job in listing["jobs"] if job["id"] == echoed]
        assert canary in listed["traceback"]

        gateway_log = gw.log_path.read_text(errors="replace")
        gateway_events = {line.get("event") for line in gw.log_lines()}
    workerd.stop()
    workerd_out = workerd.log_path.read_text(errors="replace") + workerd.stderr()

    # The workload really ran through every path, and both processes logged it.
    assert {"job_enqueued", "job_replayed", "job_purged", "job_canceled"} <= gateway_events
    for event in ("job_completed", "job_retry_scheduled", "job_dead", "job_claimed"):
        assert workerd.events(event), event
    assert {rec["error"] for rec in workerd.events("job_dead")} == {
        "RuntimeError",
        "PermanentError",
    }
    assert canary not in gateway_log
    assert canary not in workerd_out
