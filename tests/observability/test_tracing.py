"""Tracing: off by default; on, each job's life is one span tree, with no payload in it.

The gateway app, a worker and a scheduler run in this process on the private Redis, their
loops stepped by hand; spans go to an in-memory exporter (shared.obs.tracing's test hook).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

# Imported outright, not importorskip: the test command installs the SDK, and a missing one must
# fail under CI rather than skip.
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode

import workerd.demo  # noqa: F401 (registers the demo handlers)
from shared.engine.engine_types import Policy
from shared.engine.scripts import Scripts
from shared.obs import tracing
from shared.settings.config import Settings
from tests.fakes import IdleSlot
from tests.gateway.conftest import make_app
from tests.observability.conftest import PREFIX
from tests.support.redis_server import RedisServer
from tests.support.tools import ROOT
from workerd.scheduler import SchedulerProcess
from workerd.worker import WorkerProcess

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
HOUR_MS = 3_600_000
QUEUE_SPANS = {"task.enqueue", "task.claim", "task.execute", "task.acknowledge"}


@pytest.fixture
def stack(r: redis.Redis) -> dict[str, Any]:
    return make_stack(r)


def make_stack(r: redis.Redis, **env: str) -> dict[str, Any]:
    """Return the gateway app's test client, a worker and a scheduler on the private Redis."""
    scripts = Scripts(r, policy=Policy(retry_base_ms=1, retry_max_ms=1))
    scripts.load()
    settings = Settings.from_env(env)
    worker = WorkerProcess(settings, scripts, IdleSlot(), "w1", os.getppid())
    scheduler = SchedulerProcess(
        scripts,
        IdleSlot(),
        os.getppid(),
        reconnect_grace=0,
        served=settings.worker_queues.names,  # as the supervisor passes them
    )
    return {"app": make_app(scripts).test_client(), "worker": worker, "sched": scheduler}


def _run_one(worker: WorkerProcess) -> None:
    """Step the worker until it has run one job (bounded)."""
    deadline = time.monotonic() + 5
    before = worker.jobs_done
    while worker.jobs_done == before:
        assert time.monotonic() < deadline, "the worker ran no job"
        worker.step()
    worker.next_job = None  # a claimed next job would be run by the next _run_one anyway


def _promote_all(scheduler: SchedulerProcess) -> None:
    scheduler.step(-1.0, now_ms=int(time.time() * 1000) + HOUR_MS)  # promote only


def _tree(exporter: InMemorySpanExporter, trace_id: int) -> list[tuple[str, str | None]]:
    """Return (span, parent span name) for every span of one trace, in end order."""
    found = [s for s in exporter.get_finished_spans() if s.context.trace_id == trace_id]
    names = {s.context.span_id: s.name for s in found}
    return [(s.name, names.get(s.parent.span_id) if s.parent else None) for s in found]


def _outcomes(exporter: InMemorySpanExporter, trace_id: int) -> list[tuple[str, str]]:
    """Return (span, outcome) for every span of one trace, in end order."""
    found = [s for s in exporter.get_finished_spans() if s.context.trace_id == trace_id]
    return [(s.name, s.attributes.get("taskforge.outcome")) for s in found]


def _enqueue(app: Any, body: dict[str, Any], headers: dict[str, str] | None = None) -> str:
    reply = app.post("/enqueue", json=body, headers=headers or {})
    assert reply.status_code == 201, reply.get_json()
    return reply.get_json()["id"]


def _trace_of(r: redis.Redis, job_id: str) -> tuple[int, str]:
    traceparent = r.hget(f"{PREFIX}job:{job_id}", "traceparent").decode()
    _, trace_id, span_id, _ = traceparent.split("-")
    return int(trace_id, 16), span_id


def test_a_normal_job_continues_the_clients_trace(
    r: redis.Redis, spans: InMemorySpanExporter, stack: dict[str, Any]
) -> None:
    header = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}
    job_id = _enqueue(stack["app"], {"type": "demo.noop", "payload": {"x": 1}}, header)
    trace_id, enqueue_span = _trace_of(r, job_id)
    assert trace_id == int(CLIENT_TRACE, 16)  # the stored traceparent is ours, in their trace
    assert enqueue_span != CLIENT_SPAN
    _run_one(stack["worker"])

    assert _tree(spans, trace_id) == [
        ("task.enqueue", None),  # its parent is the client's span, not exported here
        ("task.claim", "task.enqueue"),
        ("task.execute", "task.enqueue"),
        ("task.acknowledge", "task.enqueue"),
    ]
    enqueue = spans.get_finished_spans()[0]
    assert enqueue.parent.span_id == int(CLIENT_SPAN, 16)
    assert {s.attributes["taskforge.job_id"] for s in spans.get_finished_spans()} == {job_id}
    assert _outcomes(spans, trace_id) == [
        ("task.enqueue", "enqueued"),
        ("task.claim", "claimed"),
        ("task.execute", "succeeded"),
        ("task.acknowledge", "completed"),
    ]


def test_the_queue_spans_follow_the_messaging_conventions(
    spans: InMemorySpanExporter, stack: dict[str, Any]
) -> None:
    job_id = _enqueue(stack["app"], {"type": "demo.noop"})
    _run_one(stack["worker"])

    expected = {
        "task.enqueue": (SpanKind.PRODUCER, "send", "enqueue"),
        "task.claim": (SpanKind.CLIENT, "receive", "claim"),
        "task.execute": (SpanKind.CONSUMER, "process", "execute"),
        "task.acknowledge": (SpanKind.CLIENT, "settle", "acknowledge"),
    }
    found = spans.get_finished_spans()
    assert [s.name for s in found] == list(expected)
    for span in found:
        kind, operation, name = expected[span.name]
        assert span.kind is kind, span.name
        messaging = {k: v for k, v in span.attributes.items() if k.startswith("messaging.")}
        assert messaging == {
            "messaging.system": "taskforge",
            "messaging.operation.type": operation,
            "messaging.operation.name": name,
            "messaging.destination.name": "default",
            "messaging.message.id": job_id,
        }, span.name


@pytest.mark.parametrize("env", [{}, {"WORKER_BATCH": "8"}], ids=["held", "batched"])
def test_a_completion_read_later_is_acknowledged_in_its_own_jobs_trace(
    r: redis.Redis, spans: InMemorySpanExporter, env: dict[str, str]
) -> None:
    # A backlog: a worker holding its next job reads each completion after the next job ran
    # (workerd.prefetch); a batched one sends and records them together (workerd.batching).
    # Each job still gets its acknowledge span, in its own trace, from the send to the record.
    stack = make_stack(r, **env)
    ids = [_enqueue(stack["app"], {"type": "demo.noop"}) for _ in range(6)]
    worker = stack["worker"]
    deadline = time.monotonic() + 10
    while worker.jobs_done < len(ids):
        assert time.monotonic() < deadline, f"the worker ran {worker.jobs_done} jobs"
        worker.step()
    worker._hand_back_unstarted_job()  # as run() does: the held or batched rest is written
    for job_id in ids:
        trace_id, _ = _trace_of(r, job_id)
        assert ("task.acknowledge", "task.enqueue") in _tree(spans, trace_id), job_id
        assert ("task.acknowledge", "completed") in _outcomes(spans, trace_id), job_id
    acknowledged = [s for s in spans.get_finished_spans() if s.name == "task.acknowledge"]
    assert sorted(s.attributes["taskforge.job_id"] for s in acknowledged) == sorted(ids)
    assert all(s.start_time <= s.end_time for s in acknowledged)


def test_a_batch_enqueue_is_one_producer_span_counting_its_jobs(
    r: redis.Redis, spans: InMemorySpanExporter, stack: dict[str, Any]
) -> None:
    reply = stack["app"].post("/enqueue/batch", json={"jobs": [{"type": "demo.noop"}] * 3})
    assert reply.status_code == 201
    (batch,) = spans.get_finished_spans()
    assert (batch.name, batch.kind) == ("task.enqueue", SpanKind.PRODUCER)
    assert batch.attributes["messaging.batch.message_count"] == 3
    assert batch.attributes["messaging.operation.type"] == "send"
    assert batch.attributes["taskforge.outcome"] == "enqueued"
    assert "messaging.message.id" not in batch.attributes  # one span, three messages
    first = reply.get_json()["jobs"][0]["id"]
    assert _trace_of(r, first) == (batch.context.trace_id, f"{batch.context.span_id:016x}")


def test_every_span_of_a_job_in_another_queue_names_that_queue(
    r: redis.Redis, spans: InMemorySpanExporter
) -> None:
    stack = make_stack(r, WORKER_QUEUES="q1")
    job_id = _enqueue(stack["app"], {"type": "demo.fail", "max_retries": 2, "queue": "q1"})
    _run_one(stack["worker"])  # retrying
    _promote_all(stack["sched"])
    _run_one(stack["worker"])  # dead
    assert stack["app"].post(f"/dlq/{job_id}/retry").status_code == 200

    found = spans.get_finished_spans()
    assert {s.name for s in found} == set(tracing.SPANS) - {"task.schedule.promote", "task.recover"}
    for span in found:
        assert span.attributes["taskforge.queue"] == "q1", span.name
        destination = span.attributes.get("messaging.destination.name")
        assert destination == ("q1" if span.name in QUEUE_SPANS else None), span.name


def test_a_batch_names_its_queue_only_when_all_its_jobs_share_it(
    spans: InMemorySpanExporter, stack: dict[str, Any]
) -> None:
    one_queue = {"jobs": [{"type": "demo.noop", "queue": "q1"}] * 2}
    two_queues = {"jobs": [{"type": "demo.noop", "queue": "q1"}, {"type": "demo.noop"}]}
    assert stack["app"].post("/enqueue/batch", json=one_queue).status_code == 201
    assert stack["app"].post("/enqueue/batch", json=two_queues).status_code == 201

    shared_queue, mixed = spans.get_finished_spans()
    assert shared_queue.attributes["messaging.destination.name"] == "q1"
    assert shared_queue.attributes["taskforge.queue"] == "q1"
    # The messaging conventions name a batch's destination only if it applies to every message.
    assert "messaging.destination.name" not in mixed.attributes
    assert "taskforge.queue" not in mixed.attributes


def test_an_idempotent_repeat_is_a_duplicate_enqueue(
    spans: InMemorySpanExporter, stack: dict[str, Any]
) -> None:
    headers = {"Idempotency-Key": "once"}
    first = _enqueue(stack["app"], {"type": "demo.noop"}, headers)
    again = stack["app"].post("/enqueue", json={"type": "demo.noop"}, headers=headers)
    assert again.status_code == 200
    outcomes = [s.attributes["taskforge.outcome"] for s in spans.get_finished_spans()]
    assert outcomes == ["enqueued", "duplicate"]
    assert spans.get_finished_spans()[1].attributes["taskforge.duplicate_of"] == first


def test_the_other_spans_are_internal_without_messaging_attributes(
    spans: InMemorySpanExporter, stack: dict[str, Any]
) -> None:
    job_id = _enqueue(stack["app"], {"type": "demo.fail", "max_retries": 2})
    _run_one(stack["worker"])  # retrying
    _promote_all(stack["sched"])
    _run_one(stack["worker"])  # dead
    assert stack["app"].post(f"/dlq/{job_id}/retry").status_code == 200
    internal = [s for s in spans.get_finished_spans() if s.name not in QUEUE_SPANS]
    assert {s.name for s in internal} == {
        "task.retry.schedule",
        "task.retry.promote",
        "task.dlq.transition",
        "task.replay",
    }
    for span in internal:
        assert span.kind is SpanKind.INTERNAL, span.name
        assert not [k for k in span.attributes if k.startswith("messaging.")], span.name


def test_a_retried_then_dead_then_replayed_job_is_one_trace(
    r: redis.Redis, spans: InMemorySpanExporter, stack: dict[str, Any]
) -> None:
    canary = f"sk_live_CANARY{uuid.uuid4().hex}"
    body = {"type": "demo.fail", "payload": {"error": canary}, "max_retries": 2}
    job_id = _enqueue(stack["app"], body)
    trace_id, _ = _trace_of(r, job_id)
    _run_one(stack["worker"])  # fails: retrying
    _promote_all(stack["sched"])
    _run_one(stack["worker"])  # fails again: dead
    assert stack["app"].post(f"/dlq/{job_id}/retry").status_code == 200
    _run_one(stack["worker"])  # the replay runs (and fails: retrying again)

    run = [("task.claim", "task.enqueue"), ("task.execute", "task.enqueue")]
    assert _tree(spans, trace_id) == [
        ("task.enqueue", None),
        *run,
        ("task.retry.schedule", "task.acknowledge"),
        ("task.acknowledge", "task.enqueue"),
        ("task.retry.promote", "task.enqueue"),
        *run,
        ("task.dlq.transition", "task.acknowledge"),
        ("task.acknowledge", "task.enqueue"),
        ("task.replay", "task.enqueue"),
        *run,
        ("task.retry.schedule", "task.acknowledge"),
        ("task.acknowledge", "task.enqueue"),
    ]
    assert [outcome for _, outcome in _outcomes(spans, trace_id)] == [
        "enqueued",
        *["claimed", "failed", "retrying", "retrying"],
        "promoted",
        *["claimed", "failed", "dead", "dead"],
        "replayed",
        *["claimed", "failed", "retrying", "retrying"],
    ]
    executions = [s for s in spans.get_finished_spans() if s.name == "task.execute"]
    assert [s.status.status_code for s in executions] == [StatusCode.ERROR] * 3
    assert {s.status.description for s in executions} == {"RuntimeError"}
    # Nothing of the payload or the error message in any span.
    for span in spans.get_finished_spans():
        text = repr(dict(span.attributes)) + repr(span.status.description) + repr(span.events)
        assert canary not in text, span.name


def test_a_scheduled_job_and_a_recovered_job_continue_their_traces(
    r: redis.Redis, spans: InMemorySpanExporter, stack: dict[str, Any]
) -> None:
    scheduled = _enqueue(
        stack["app"], {"type": "demo.noop", "scheduled_at": "2099-01-01T00:00:00Z"}
    )
    sched_trace, _ = _trace_of(r, scheduled)
    stack["sched"].step(-1.0, now_ms=4_102_444_800_000 + 1)  # 2100-01-01: due, promote only
    _run_one(stack["worker"])
    assert _outcomes(spans, sched_trace) == [
        ("task.enqueue", "enqueued"),
        ("task.schedule.promote", "promoted"),
        ("task.claim", "claimed"),
        ("task.execute", "succeeded"),
        ("task.acknowledge", "completed"),
    ]

    lost = _enqueue(stack["app"], {"type": "demo.noop"})
    lost_trace, _ = _trace_of(r, lost)
    scripts: Scripts = stack["worker"].scripts
    assert scripts.claim("a-worker-that-dies").id == lost
    lease_over = int(time.time() * 1000) + scripts.policy.lease_ms + 1000
    stack["sched"].step(time.monotonic(), now_ms=lease_over)
    assert ("task.recover", "task.enqueue") in _tree(spans, lost_trace)
    assert ("task.recover", "recovered") in _outcomes(spans, lost_trace)


def test_tracing_is_off_by_default_with_nothing_imported_or_stored(
    r: redis.Redis, redis_server: RedisServer
) -> None:
    # A fresh interpreter, as a deployment without the variables sees it.
    script = textwrap.dedent(
        """
        import sys
        import redis
        from shared.obs import tracing
        from shared.engine.scripts import Scripts
        from shared.model.jobs import validate_enqueue
        import gateway.service, workerd.worker
        assert not tracing.enabled()
        with tracing.span("task.enqueue") as span:
            assert span is None and tracing.current_traceparent() is None
        scripts = Scripts(redis.Redis.from_url(sys.argv[1]))
        request = validate_enqueue({"type": "demo.noop"})
        scripts.enqueue(request, "off-job", traceparent=tracing.current_traceparent())
        # (redis-py imports the OpenTelemetry API itself when it is installed.)
        assert tracing._state is None, "an SDK was created"
        assert not [m for m in sys.modules if m.startswith("opentelemetry.exporter")]
        import threading
        assert threading.active_count() == 1, "a thread was started"
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(ROOT)
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:4317"  # set, but not enabled
    command = [sys.executable, "-c", script, redis_server.url]
    subprocess.run(command, cwd=ROOT, env=env, check=True, timeout=30)
    assert r.hexists(f"{PREFIX}job:off-job", "id")
    assert not r.hexists(f"{PREFIX}job:off-job", "traceparent")


def test_log_lines_inside_a_span_carry_its_trace_and_span_ids(
    spans: InMemorySpanExporter, capsys: pytest.CaptureFixture[str]
) -> None:
    import json
    import logging

    from shared.obs import log as shared_log

    shared_log.configure("tracing-test", "INFO")
    logger = logging.getLogger("tests.tracing")
    with tracing.span("task.execute", None, {"taskforge.job_id": "j"}) as current:
        logger.info("job_started")
    logger.info("job_completed")  # outside any span: no ids

    inside, outside = (json.loads(line) for line in capsys.readouterr().out.splitlines()[-2:])
    context = current.get_span_context()
    assert inside["trace_id"] == f"{context.trace_id:032x}"
    assert inside["span_id"] == f"{context.span_id:016x}"
    assert "trace_id" not in outside and "span_id" not in outside


def test_the_job_enqueued_lines_carry_the_enqueue_spans_ids(
    r: redis.Redis,
    spans: InMemorySpanExporter,
    stack: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    import json
    import logging

    from shared.obs import log as shared_log

    shared_log.configure("tracing-test", "INFO")
    caplog.set_level(logging.DEBUG, logger="shared.engine.lifecycle")  # job_enqueued is DEBUG
    capsys.readouterr()
    job_id = _enqueue(stack["app"], {"type": "demo.noop"})
    batch = stack["app"].post("/enqueue/batch", json={"jobs": [{"type": "demo.noop"}] * 2})
    assert batch.status_code == 201
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    one, many = [line for line in lines if line["event"] == "job_enqueued"]

    trace_id, span_id = _trace_of(r, job_id)
    assert (one["job_id"], one["trace_id"], one["span_id"]) == (job_id, f"{trace_id:032x}", span_id)
    trace_id, span_id = _trace_of(r, batch.get_json()["jobs"][0]["id"])
    assert (many["trace_id"], many["span_id"]) == (f"{trace_id:032x}", span_id)


def test_an_exception_leaving_a_span_sets_error_outcome_and_type_only(
    spans: InMemorySpanExporter,
) -> None:
    canary = f"sk_live_CANARY{uuid.uuid4().hex}"
    with pytest.raises(ConnectionError), tracing.span("task.enqueue", None, {}):
        raise ConnectionError(canary)
    (span,) = spans.get_finished_spans()
    assert span.attributes["taskforge.outcome"] == "error"
    assert span.attributes["error.type"] == "ConnectionError"
    assert span.status.status_code is StatusCode.ERROR
    assert canary not in repr(dict(span.attributes)) + repr(span.status) + repr(span.events)


def test_the_observability_doc_lists_every_span_with_its_kind() -> None:
    text = (ROOT / "docs" / "OBSERVABILITY.md").read_text()
    for name, (kind, _) in tracing.SPANS.items():
        assert f"`{name}` ({kind})" in " ".join(text.split()), name


def test_the_readme_names_every_span() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    missing = [name for name in tracing.SPANS if f"`{name}`" not in readme]
    assert not missing, missing
