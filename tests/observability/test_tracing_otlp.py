"""Tracing through the real OTLP/gRPC exporter to a gRPC receiver in this process.

It needs the tracing extra (``pip install -e '.[tracing]'``: the exporter brings grpcio and
opentelemetry-proto); without it this module skips.
"""

from __future__ import annotations

import pytest
import redis

pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc", reason="needs .[tracing]")

from shared import tracing
from tests.observability.otlp_collector import OtlpCollector
from tests.observability.test_tracing import _enqueue, _run_one, _trace_of, make_stack


def test_an_otlp_grpc_collector_receives_the_kinds_outcomes_and_messaging_attributes(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = make_stack(r)
    # The real exporter (OTLP over gRPC, batched) to a real gRPC receiver: what a collector sees.
    collector = OtlpCollector()
    collector.start()
    try:
        monkeypatch.setenv("OTEL_TRACING_ENABLED", "true")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
        monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
        tracing.shutdown()  # a fresh provider, built from the variables
        job_id = _enqueue(stack["app"], {"type": "noop"})
        _run_one(stack["worker"])
        tracing.shutdown()  # flushes the batch to the collector
    finally:
        collector.stop()

    trace_id, enqueue_span = _trace_of(r, job_id)
    received = [s for s in collector.spans() if s.trace_id == f"{trace_id:032x}"]
    by_name = {s.name: s for s in received}
    assert [(s.name, s.kind) for s in received] == [
        ("task.enqueue", "PRODUCER"),
        ("task.claim", "CLIENT"),
        ("task.execute", "CONSUMER"),
        ("task.acknowledge", "CLIENT"),
    ]
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
