"""Tracing through the real OTLP/gRPC exporter to a gRPC receiver in this process.

It needs the OTLP/gRPC exporter (in requirements-test.txt and the tracing extra; it brings
grpcio and opentelemetry-proto): without it this module skips on a laptop and fails under CI.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest
import redis

from tests.support.tools import in_ci

if not in_ci():
    pytest.importorskip(
        "opentelemetry.exporter.otlp.proto.grpc", reason="needs requirements-tracing.txt"
    )

from shared.obs import tracing
from tests.observability.otlp_collector import OtlpCollector
from tests.observability.test_tracing import _enqueue, _run_one, _trace_of, make_stack
from tests.support.gunicorn import Gunicorn
from tests.support.tools import wait_until
from tests.support.workerd import Workerd

QUEUE_KINDS = [
    ("task.enqueue", "PRODUCER"),
    ("task.claim", "CLIENT"),
    ("task.execute", "CONSUMER"),
    ("task.acknowledge", "CLIENT"),
]


@pytest.fixture
def collector() -> Iterator[OtlpCollector]:
    receiver = OtlpCollector()
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.stop()


def test_an_otlp_grpc_collector_receives_the_kinds_outcomes_and_messaging_attributes(
    r: redis.Redis, collector: OtlpCollector, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real exporter (OTLP over gRPC, batched) to a real gRPC receiver: what a collector sees.
    stack = make_stack(r)
    monkeypatch.setenv("OTEL_TRACING_ENABLED", "true")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    tracing.shutdown()  # a fresh provider, built from the variables
    try:
        job_id = _enqueue(stack["app"], {"type": "demo.noop"})
        _run_one(stack["worker"])
    finally:
        tracing.shutdown()  # flushes the batch to the collector

    trace_id, enqueue_span = _trace_of(r, job_id)
    received = [s for s in collector.spans() if s.trace_id == f"{trace_id:032x}"]
    by_name = {s.name: s for s in received}
    assert [(s.name, s.kind) for s in received] == QUEUE_KINDS
    assert by_name["task.enqueue"].span_id == enqueue_span
    operations = {"task.enqueue": "send", "task.claim": "receive"}
    operations |= {"task.execute": "process", "task.acknowledge": "settle"}
    outcomes = {"task.enqueue": "enqueued", "task.claim": "claimed"}
    outcomes |= {"task.execute": "succeeded", "task.acknowledge": "completed"}
    for span in received:
        assert span.service in (tracing.PRODUCER, tracing.WORKER)
        assert span.attributes["taskforge.outcome"] == outcomes[span.name]
        assert span.attributes["messaging.system"] == "taskforge"
        assert span.attributes["messaging.operation.type"] == operations[span.name]
        assert span.attributes["messaging.destination.name"] == "default"
        assert span.attributes["messaging.message.id"] == job_id
        if span.name != "task.enqueue":
            assert span.parent_span_id == enqueue_span


@pytest.mark.slow
def test_a_gateway_and_workerd_export_one_trace_per_job_to_the_collector(
    r: redis.Redis,
    collector: OtlpCollector,
    start_workerd: Callable[..., Workerd],
    start_gateway: Callable[..., contextlib.AbstractContextManager[Gunicorn]],
) -> None:
    # Real processes: gunicorn's forked workers and workerd's children each build their SDK.
    env = {
        "OTEL_TRACING_ENABLED": "true",
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # ms: export soon, not at the default 5 s
    }
    start_workerd(WORKER_COUNT="1", **env)
    with start_gateway(**env, LOG_LEVEL="DEBUG") as gw:  # job_enqueued is a DEBUG line
        status, _, job = gw.request("POST", "/enqueue", {"type": "demo.noop"})
        assert status == 201, job
        trace_id, enqueue_span = _trace_of(r, job["id"])

        def queue_spans() -> list:
            found = [s for s in collector.spans() if s.trace_id == f"{trace_id:032x}"]
            return found if len(found) >= len(QUEUE_KINDS) else []

        received = wait_until(queue_spans, 20, "the job's four spans at the collector")
        [line] = [line for line in gw.log_lines() if line.get("event") == "job_enqueued"]
    assert sorted((s.name, s.kind) for s in received) == sorted(QUEUE_KINDS)
    services = {s.name: s.service for s in received}
    assert services == {
        "task.enqueue": tracing.PRODUCER,
        "task.claim": tracing.WORKER,
        "task.execute": tracing.WORKER,
        "task.acknowledge": tracing.WORKER,
    }
    assert {s.attributes["messaging.message.id"] for s in received} == {job["id"]}
    assert (line["trace_id"], line["span_id"]) == (f"{trace_id:032x}", enqueue_span)
