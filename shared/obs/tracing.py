"""Optional OpenTelemetry tracing: off unless OTEL_TRACING_ENABLED=true and an OTLP endpoint.

Off (the default), every helper here is a no-op: no SDK, no exporter, no thread, no import
of the OpenTelemetry packages (optional: ``pip install -r requirements-tracing.txt``). On, each
process creates its SDK lazily at its first span, so it happens after the fork in gunicorn
workers and workerd children (the SDK's export thread must not cross a fork); the pid is
checked, so a child never reuses its parent's provider.

What a span carries: job id, type, queue, attempt, outcome, an exception's type name. Never a
payload, a result, an error message (it can echo the payload) or a credential. A job keeps
only the W3C ``traceparent`` of its ``task.enqueue`` span (hash field ``traceparent``);
every later span of the job — claim, execute, acknowledge, retries, recovery, replay —
is a child of it, so one job's whole life is one trace.

:data:`SPANS` names every span emitted, with its kind and, for the four that move a job
through the queue, its operation type in OpenTelemetry's semantic conventions for messaging
spans (the version whose operation types are create/send/receive/process/settle). The
enqueue span's context is the job's creation context, so it is the PRODUCER; ``process`` is
the CONSUMER, and its parent is that creation context (the conventions allow this for single
messages); ``receive`` (a pull: the claim) and ``settle`` (the acknowledgement) are CLIENT.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

log = logging.getLogger(__name__)

ENABLED_ENV = "OTEL_TRACING_ENABLED"
ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
PRODUCER = "taskforge-producer"
WORKER = "taskforge-worker"

SYSTEM = "taskforge"  # messaging.system
OUTCOME = "taskforge.outcome"
# The job's queue, on every job span; a messaging span also names it messaging.destination.name.
QUEUE = "taskforge.queue"

# Every span name emitted → (span kind, messaging.operation.type or None for a non-messaging
# span). Kinds are names of opentelemetry.trace.SpanKind, so that nothing is imported when off.
SPANS: dict[str, tuple[str, str | None]] = {
    "task.enqueue": ("PRODUCER", "send"),
    "task.claim": ("CLIENT", "receive"),
    "task.execute": ("CONSUMER", "process"),
    "task.acknowledge": ("CLIENT", "settle"),
    "task.retry.schedule": ("INTERNAL", None),
    "task.retry.promote": ("INTERNAL", None),
    "task.schedule.promote": ("INTERNAL", None),
    "task.recover": ("INTERNAL", None),
    "task.dlq.transition": ("INTERNAL", None),
    "task.replay": ("INTERNAL", None),
}

_service = WORKER
_state: tuple[int, Any, Any] | None = None  # (pid, provider, tracer) once set up here
_test_exporter: Any = None
_forbidden_pid = 0  # a process that forks: it must never start the SDK's export thread
_decided: bool | None = None  # enabled(), as this process last read its environment
# What span() gives when there is no tracer: one shared context that yields None, so a span of
# a process that does not trace builds nothing (no generator, no attributes).
_NO_SPAN: contextlib.nullcontext[None] = contextlib.nullcontext()


def configure(default_service: str) -> None:
    """Name this process kind's default service; the SDK itself is created at first use."""
    global _service
    _service = default_service


def enabled(env: Mapping[str, str] | None = None) -> bool:
    """Tell whether tracing is switched on (both variables are needed).

    This process's environment is read once, again in a forked child and after
    :func:`shutdown`: a worker asks several times per job, and reading the two variables each
    time cost more than the rest of tracing-off (bench/PER_JOB_COST.md).
    """
    global _decided
    if env is not None:
        return _switched_on(env)
    if _decided is None:
        _decided = _switched_on(os.environ)
    return _decided


def _forget_decision() -> None:
    global _decided
    _decided = None


os.register_at_fork(after_in_child=_forget_decision)


def _switched_on(env: Mapping[str, str]) -> bool:
    on = env.get(ENABLED_ENV, "").strip().lower() == "true"
    return _test_exporter is not None or (on and bool(env.get(ENDPOINT_ENV, "").strip()))


def use_exporter_for_tests(exporter: Any) -> None:
    """Send spans to `exporter` synchronously (an InMemorySpanExporter), or None to turn off."""
    global _test_exporter, _state, _decided
    _test_exporter, _state, _decided = exporter, None, None


def forbid_here() -> None:
    """Never trace in this process (its children may): it forks, and the SDK starts a thread."""
    global _forbidden_pid
    _forbidden_pid = os.getpid()


def _tracer() -> Any:
    """Return this process's tracer, creating the SDK on first use after a fork; None when off."""
    global _state
    if not enabled() or _forbidden_pid == os.getpid():
        return None
    if _state is not None and _state[0] == os.getpid():
        return _state[2]
    try:
        provider = _new_provider()
    except ImportError as exc:
        warning = f"tracing is on but OpenTelemetry is missing ({exc.name}): pip install -r requirements-tracing.txt"
        log.warning("config_warning", extra={"warning": warning})
        _state = (os.getpid(), None, None)  # warn once per process
        return None
    _state = (os.getpid(), provider, provider.get_tracer("taskforge"))
    return _state[2]


def _new_provider() -> Any:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    service = os.environ.get("OTEL_SERVICE_NAME", "").strip() or _service
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    if _test_exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(_test_exporter))
        return provider
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    insecure = os.environ.get("OTEL_EXPORTER_OTLP_INSECURE", "true").strip().lower() != "false"
    exporter = OTLPSpanExporter(endpoint=os.environ[ENDPOINT_ENV].strip(), insecure=insecure)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def shutdown() -> None:
    """Flush and stop this process's exporter (children leave through os._exit, not atexit);
    the next span reads the environment again."""
    global _state, _decided
    if _state is not None and _state[0] == os.getpid() and _state[1] is not None:
        _state[1].shutdown()
    _state, _decided = None, None


def _context(traceparent: str | None) -> Any:
    if not traceparent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


def span(
    name: str,
    traceparent: str | None = None,
    attributes: Mapping[str, Any] | None = None,
    *,
    start_ms: int | None = None,
) -> contextlib.AbstractContextManager[Any]:
    """Run the block in a span, child of `traceparent` if given; yield it (None when off)."""
    tracer = _tracer()
    if tracer is None:
        return _NO_SPAN
    return _open_span(tracer, name, traceparent, attributes, start_ms)


@contextlib.contextmanager
def _open_span(
    tracer: Any,
    name: str,
    traceparent: str | None,
    attributes: Mapping[str, Any] | None,
    start_ms: int | None,
) -> Iterator[Any]:
    start = None if start_ms is None else start_ms * 1_000_000
    kind, attributes = _kind_and_attributes(name, attributes)
    with tracer.start_as_current_span(
        name,
        context=_context(traceparent),
        kind=kind,
        attributes=attributes,
        start_time=start,
        record_exception=False,  # an exception's message can echo the payload
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except Exception as exc:
            # Only the type's name: its message can echo the payload.
            current.set_attribute(OUTCOME, "error")
            failed(current, type(exc).__name__)
            raise


def record(
    name: str,
    traceparent: str | None,
    attributes: Mapping[str, Any] | None = None,
    *,
    start_ms: int | None = None,
    end_ms: int | None = None,
) -> None:
    """Emit one finished span (an event already past, such as a promotion or a claim)."""
    tracer = _tracer()
    if tracer is None:
        return
    start = None if start_ms is None else start_ms * 1_000_000
    kind, attributes = _kind_and_attributes(name, attributes)
    current = tracer.start_span(
        name, context=_context(traceparent), kind=kind, attributes=attributes, start_time=start
    )
    current.end(end_time=None if end_ms is None else end_ms * 1_000_000)


def _kind_and_attributes(
    name: str, attributes: Mapping[str, Any] | None
) -> tuple[Any, dict[str, Any]]:
    """Return the span kind of `name` and its attributes, with messaging.* for a messaging span."""
    from opentelemetry.trace import SpanKind

    kind, operation = SPANS.get(name, ("INTERNAL", None))
    found = dict(attributes or {})
    if operation is not None:
        found["messaging.system"] = SYSTEM
        found["messaging.operation.type"] = operation
        found["messaging.operation.name"] = name.removeprefix("task.")
        if QUEUE in found:  # a batch across queues has no one destination, so it names none
            found["messaging.destination.name"] = found[QUEUE]
        if "taskforge.job_id" in found:  # a single job; a batch names its count instead
            found["messaging.message.id"] = found["taskforge.job_id"]
    return SpanKind[kind], found


def outcome(current: Any, value: str) -> None:
    """Set the outcome of a span still open (no-op when off)."""
    if current is not None:
        current.set_attribute(OUTCOME, value)


def current_attributes(attributes: Mapping[str, Any]) -> None:
    """Set attributes of the active span, if this process traces and a span is active."""
    if _state is None or _state[2] is None or _state[0] != os.getpid():
        return
    from opentelemetry import trace

    trace.get_current_span().set_attributes(attributes)


def failed(current: Any, kind: str) -> None:
    """Mark a span as failed with an error type name only (never its message)."""
    if current is None:
        return
    from opentelemetry.trace import Status, StatusCode

    current.set_status(Status(StatusCode.ERROR, kind))
    current.set_attribute("error.type", kind)


def current_traceparent() -> str | None:
    """Return the W3C traceparent of the active span, or None when tracing is off."""
    if _tracer() is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def current_ids() -> tuple[str, str] | None:
    """Return (trace_id, span_id) of the active span in hex, or None (off, or no span).

    Cheap when tracing is off: nothing is imported unless this process created its SDK.
    """
    if _state is None or _state[2] is None or _state[0] != os.getpid():
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def job_attributes(
    job_id: str, job_type: str, outcome: str | None = None, *, queue: str, **more: Any
) -> dict[str, Any]:
    """Return the attributes every job span carries (identifiers only, never data)."""
    found = {"taskforge.job_id": job_id, "taskforge.job_type": job_type, QUEUE: queue, **more}
    if outcome is not None:
        found[OUTCOME] = outcome
    return found


def traceparents(client: Any, keys: Any, job_ids: list[str]) -> list[str | None]:
    """Read the stored traceparent of each job (one round trip; only when tracing is on)."""
    if not job_ids or not enabled():
        return [None] * len(job_ids)
    pipe = client.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.hget(keys.job(job_id), "traceparent")
    return [value.decode() if value else None for value in pipe.execute()]
