"""Every outcome through shared.engine.lifecycle: one log line, its counters, its span — as before.

EXPECTED spells out, independently of lifecycle.TABLE, what each outcome wrote before the
lifecycle home existed (docs/OBSERVABILITY.md): a change to the table that changes a line,
a counter or a span fails here.
"""

from __future__ import annotations

import logging
import os
from logging import DEBUG, ERROR, INFO, WARNING

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY

from shared.engine import lifecycle
from shared.engine.lifecycle import Outcome, Transition
from shared.obs import log, metrics, tracing
from tests.support.tools import ROOT

JOB_ID = "00000000-0000-4000-8000-00000000abcd"
JOB_TYPE = "lifecycle_test"
QUEUE = "q1"
TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

# outcome -> (event, level, counters, point span, taskforge.outcome of the spans)
EXPECTED: dict[Outcome, tuple[str | None, int, set[str], str | None, str | None]] = {
    Outcome.ENQUEUED: ("job_enqueued", DEBUG, {"enqueued"}, None, "enqueued"),
    Outcome.DUPLICATE: (None, INFO, set(), None, "duplicate"),
    Outcome.PROMOTED: ("job_promoted", DEBUG, set(), "task.schedule.promote", "promoted"),
    Outcome.RETRY_PROMOTED: ("job_promoted", DEBUG, set(), "task.retry.promote", "promoted"),
    Outcome.CLAIMED: ("job_claimed", DEBUG, {"claimed"}, "task.claim", "claimed"),
    Outcome.STARTED: ("job_started", INFO, set(), None, None),
    Outcome.COMPLETED: ("job_completed", INFO, {"completed"}, None, "completed"),
    Outcome.STALE_ACK: ("job_stale_ack", WARNING, {"stale_acks"}, None, "stale_ack"),
    Outcome.STALE_FAILURE: ("job_stale_ack", WARNING, {"failed", "stale_acks"}, None, "stale_ack"),
    Outcome.RETRYING: (
        "job_retry_scheduled",
        INFO,
        {"failed", "retried"},
        "task.retry.schedule",
        "retrying",
    ),
    Outcome.DEAD: ("job_dead", WARNING, {"failed", "dead"}, "task.dlq.transition", "dead"),
    Outcome.TIMED_OUT_RETRYING: ("job_timed_out", WARNING, {"timed_out", "retried"}, None, None),
    Outcome.TIMED_OUT_DEAD: ("job_timed_out", WARNING, {"timed_out", "dead"}, None, None),
    Outcome.TIMED_OUT_STALE: ("job_timed_out", WARNING, {"timed_out"}, None, None),
    Outcome.RECOVERED: ("job_recovered", WARNING, {"recovered"}, "task.recover", "recovered"),
    Outcome.RECOVERY_CAP: ("job_dead", ERROR, {"dead"}, "task.dlq.transition", "dead"),
    Outcome.HANDED_BACK: ("job_released", INFO, {"released"}, None, None),
    Outcome.RELEASED: ("job_released", WARNING, {"released"}, None, None),
    Outcome.REPLAYED: ("job_replayed", INFO, {"replayed"}, "task.replay", "replayed"),
    Outcome.CANCELED: ("job_canceled", INFO, {"canceled"}, None, None),
    Outcome.CANCEL_REQUESTED: ("job_cancel_requested", INFO, {"cancel_requested"}, None, None),
    Outcome.CANCELED_RUNNING: ("job_canceled", INFO, {"canceled"}, None, "canceled"),
    Outcome.PURGED: ("job_purged", INFO, {"purged"}, None, None),
}


@pytest.fixture(autouse=True)
def fresh_type_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    # Other tests' types and queues must not push this test's past the label caps.
    monkeypatch.setattr(metrics, "_seen_types", set())
    monkeypatch.setattr(metrics, "_seen_queues", set())


def counters(job_type: str = JOB_TYPE, queue: str = QUEUE) -> dict[str, float]:
    labels = {"type": job_type, "queue": queue}
    return {
        event: REGISTRY.get_sample_value(f"taskforge_jobs_{event}_total", labels) or 0.0
        for event in metrics.LIFECYCLE_EVENTS
    }


def lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [rec for rec in caplog.records if rec.getMessage().startswith("job_")]


def test_every_outcome_is_in_the_table_and_in_this_test() -> None:
    assert set(lifecycle.TABLE) == set(Outcome) == set(EXPECTED)
    for row in lifecycle.TABLE.values():
        assert set(row.counters) <= set(metrics.LIFECYCLE_EVENTS)
        assert row.span is None or row.span in tracing.SPANS
        assert row.event is None or row.event in log.EVENTS  # the closed vocabulary


def doc_row(outcome: Outcome) -> str:
    """Return the start of the outcome's row in docs/OBSERVABILITY.md, rendered from the table."""
    row = lifecycle.TABLE[outcome]
    event = "—" if row.event is None else f"`{row.event}` ({logging.getLevelName(row.level)})"
    counted = ", ".join(f"`{name}`" for name in row.counters) or "—"
    if row.span is not None:
        span = f"`{row.span}`: `{row.span_outcome}`"
    else:
        span = "—" if row.span_outcome is None else f"the open span: `{row.span_outcome}`"
    return f"| `{outcome.value}` | {event} | {counted} | {span} | "


def test_the_docs_table_of_outcomes_is_the_code_table() -> None:
    doc = (ROOT / "docs" / "OBSERVABILITY.md").read_text().splitlines()
    missing = [o.value for o in Outcome if not any(line.startswith(doc_row(o)) for line in doc)]
    assert missing == []


@pytest.mark.parametrize("outcome", list(Outcome), ids=lambda o: o.value)
def test_one_record_writes_one_line_its_counters_and_its_span(
    outcome: Outcome, caplog: pytest.LogCaptureFixture, spans: InMemorySpanExporter
) -> None:
    event, level, counted, point_span, span_outcome = EXPECTED[outcome]
    before = counters()

    with caplog.at_level(logging.DEBUG), tracing.span("task.acknowledge"):
        lifecycle.record(
            outcome,
            JOB_ID,
            JOB_TYPE,
            queue=QUEUE,
            attempt=2,
            trace=None,
            attributes={"taskforge.recoveries": 1},
            reason="because",
        )

    found = lines(caplog)
    if event is None:
        assert found == []
    else:
        (line,) = found
        assert (line.getMessage(), line.levelno) == (event, level)
        fields = {k: getattr(line, k) for k in ("job_id", "type", "queue", "attempt", "reason")}
        assert fields == {
            "job_id": JOB_ID,
            "type": JOB_TYPE,
            "queue": QUEUE,
            "attempt": 2,
            "reason": "because",
        }
    after = counters()
    assert {name for name in after if after[name] != before[name]} == counted
    assert all(after[name] == before[name] + 1 for name in counted)

    finished = {s.name: s for s in spans.get_finished_spans()}
    acknowledge = finished.pop("task.acknowledge")
    assert acknowledge.attributes.get(tracing.OUTCOME) == span_outcome
    if point_span is None:
        assert finished == {}
        return
    (span,) = finished.values()
    assert span.name == point_span
    assert span.parent is not None and span.parent.span_id == acknowledge.context.span_id
    assert (
        dict(span.attributes or {}).items()
        >= {
            "taskforge.job_id": JOB_ID,
            "taskforge.job_type": JOB_TYPE,
            "taskforge.queue": QUEUE,
            "taskforge.attempt": 2,
            "taskforge.recoveries": 1,
            tracing.OUTCOME: span_outcome,
        }.items()
    )


def test_a_point_span_is_a_child_of_the_jobs_stored_traceparent(
    spans: InMemorySpanExporter,
) -> None:
    lifecycle.record(
        Outcome.CLAIMED, JOB_ID, JOB_TYPE, queue=QUEUE, trace=TRACE, start_ms=1_000, end_ms=1_250
    )

    (span,) = spans.get_finished_spans()
    assert span.name == "task.claim"
    assert f"{span.context.trace_id:032x}" == TRACE.split("-")[1]
    assert (span.start_time, span.end_time) == (1_000_000_000, 1_250_000_000)
    assert "taskforge.attempt" not in (span.attributes or {})  # none given: none claimed
    assert span.attributes["messaging.destination.name"] == QUEUE  # a claim is a receive


def test_a_duplicate_names_the_earlier_job_on_the_open_span(spans: InMemorySpanExporter) -> None:
    with tracing.span("task.enqueue"):
        earlier = {"taskforge.duplicate_of": JOB_ID}
        lifecycle.record(Outcome.DUPLICATE, JOB_ID, JOB_TYPE, queue=QUEUE, attributes=earlier)

    (span,) = spans.get_finished_spans()
    assert span.attributes is not None
    assert (span.attributes[tracing.OUTCOME], span.attributes["taskforge.duplicate_of"]) == (
        "duplicate",
        JOB_ID,
    )


def test_a_batch_is_one_line_naming_every_job_and_counted_by_type(
    caplog: pytest.LogCaptureFixture, spans: InMemorySpanExporter
) -> None:
    jobs = [("id-1", "batch_a"), ("id-2", "batch_a"), ("id-3", "batch_b")]
    before_a, before_b = counters("batch_a")["enqueued"], counters("batch_b")["enqueued"]

    with caplog.at_level(logging.DEBUG), tracing.span("task.enqueue"):
        lifecycle.record_batch(Outcome.ENQUEUED, jobs, queue=QUEUE)

    (line,) = lines(caplog)
    assert line.getMessage() == "job_enqueued"
    assert (line.job_ids, line.types, line.queue, line.count) == (  # type: ignore[attr-defined]
        ["id-1", "id-2", "id-3"],
        {"batch_a": 2, "batch_b": 1},
        QUEUE,
        3,
    )
    assert counters("batch_a")["enqueued"] == before_a + 2
    assert counters("batch_b")["enqueued"] == before_b + 1
    (span,) = spans.get_finished_spans()
    assert (span.attributes or {})[tracing.OUTCOME] == "enqueued"


def test_sinks_get_every_transition_after_it_is_logged_and_a_failing_sink_stops_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[tuple[Transition, int]] = []

    def remember(transition: Transition) -> None:
        seen.append((transition, len(lines(caplog))))

    def broken(transition: Transition) -> None:
        raise RuntimeError("a sink's bug")

    lifecycle.add_sink(broken)
    lifecycle.add_sink(remember)
    try:
        with caplog.at_level(logging.INFO):
            lifecycle.record(
                Outcome.COMPLETED, JOB_ID, JOB_TYPE, queue=QUEUE, attempt=1, duration_ms=3.5
            )
            lifecycle.record_batch(Outcome.ENQUEUED, [("id-1", "a"), ("id-2", "b")], queue="q2")
    finally:
        lifecycle.remove_sink(broken)
        lifecycle.remove_sink(remember)
    lifecycle.record(Outcome.COMPLETED, JOB_ID, JOB_TYPE, queue=QUEUE)  # removed: not seen

    first = seen[0][0]
    assert (first.outcome, first.job_id, first.job_type, first.queue, first.attempt) == (
        Outcome.COMPLETED,
        JOB_ID,
        JOB_TYPE,
        QUEUE,
        1,
    )
    assert dict(first.fields) == {"duration_ms": 3.5}
    assert first.at_ms > 1_700_000_000_000
    assert seen[0][1] == 1  # the line was written before the sink ran
    assert [(t.outcome, t.job_id, t.queue) for t, _ in seen[1:]] == [
        (Outcome.ENQUEUED, "id-1", "q2"),
        (Outcome.ENQUEUED, "id-2", "q2"),
    ]
    failures = [r for r in caplog.records if r.getMessage() == "lifecycle_sink_failed"]
    assert len(failures) == 3 and failures[0].sink == "broken"  # type: ignore[attr-defined]


def test_a_process_that_forbade_tracing_logs_and_counts_but_records_no_span(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, spans: InMemorySpanExporter
) -> None:
    monkeypatch.setattr(tracing, "_forbidden_pid", os.getpid())
    before = counters()["recovered"]

    with caplog.at_level(logging.INFO):
        lifecycle.record(
            Outcome.RECOVERED, JOB_ID, JOB_TYPE, queue=QUEUE, trace=TRACE, reason="worker died"
        )

    assert [rec.getMessage() for rec in lines(caplog)] == ["job_recovered"]
    assert counters()["recovered"] == before + 1
    assert spans.get_finished_spans() == ()


def test_a_disabled_level_builds_no_line(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        lifecycle.record(
            Outcome.PROMOTED, JOB_ID, JOB_TYPE, queue=QUEUE, kind="scheduled", late_ms=3
        )
    assert lines(caplog) == []
