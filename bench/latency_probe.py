"""The probe bench.latency_parts loads into the processes it times (not for production).

As workerd's handlers module (TASKFORGE_HANDLERS=bench.latency_probe) it wraps the worker's
steps on an idle wake (the BLPOP's return, the claim or the reading of the one sent behind
the BLPOP, ``_execute``, ``run_handler``) and
registers ``latency_probe``, whose handler writes each step's wall-clock time beside the
producer's send time. As a gunicorn app (``bench.latency_probe:gateway_app()``) it wraps
gateway.http_worker's steps and the enqueue call the same way. Each line goes to a file in
BENCH_PROBE_DIR, one per process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from shared.engine.scripts import Scripts
from shared.engine.scripts.job_scripts import PendingClaim

WORKER_STEPS = ("woke", "claim_sent", "claim_answered", "execute", "run_handler", "handler")
GATEWAY_STEPS = (
    "readable",
    "handed_over",
    "thread",
    "parsed",
    "wsgi",
    "enqueue_sent",
    "enqueue_answered",
    "answered",
)

_stamps: dict[str, float] = {}
_out: Any = None


def _write(sent: float, steps: tuple[str, ...], last: float) -> None:
    global _out
    if _out is None:
        _out = open(  # noqa: SIM115 (one per process, for its life)
            os.path.join(os.environ["BENCH_PROBE_DIR"], f"{os.getpid()}.txt"), "a", buffering=1
        )
    times = [_stamps.get(step, 0.0) for step in steps[:-1]]
    _out.write(" ".join(f"{t:.6f}" for t in (sent, *times, last)) + "\n")
    _stamps.clear()


def _stamp_before(owner: Any, name: str, step: str) -> None:
    """Make `owner.name` record `step` when first called in a measured request or job."""
    original = getattr(owner, name)

    def stamped(*args: Any, **kwargs: Any) -> Any:
        _stamps.setdefault(step, time.time())
        return original(*args, **kwargs)

    setattr(owner, name, stamped)


def _stamp_around(owner: Any, name: str, before: str, after: str) -> None:
    """Make `owner.name` record `before` as it is called and `after` as it returns."""
    original: Callable[..., Any] = getattr(owner, name)

    def stamped(*args: Any, **kwargs: Any) -> Any:
        _stamps[before] = time.time()
        try:
            return original(*args, **kwargs)
        finally:
            _stamps[after] = time.time()

    setattr(owner, name, stamped)


def _probe_worker() -> None:
    import workerd.worker as worker_module
    from workerd import JobContext, handler

    pop_hint = worker_module.pop_hint

    def woke(*args: Any, **kwargs: Any) -> Any:
        hint = pop_hint(*args, **kwargs)
        if hint is not None:
            _stamps["woke"] = time.time()
        return hint

    worker_module.pop_hint = woke
    _stamp_around(Scripts, "claim", "claim_sent", "claim_answered")
    # An idle wait on one queue sends its claim behind the BLPOP: it has answered in Redis
    # by the time the wake-up is read, so "claim_sent" is the start of reading its reply.
    pop_hint_then_claim = worker_module.pop_hint_then_claim

    def woke_with_claim(*args: Any, **kwargs: Any) -> Any:
        hint, claim = pop_hint_then_claim(*args, **kwargs)
        if hint is not None:
            _stamps["woke"] = time.time()
        return hint, claim

    worker_module.pop_hint_then_claim = woke_with_claim
    _stamp_around(PendingClaim, "result", "claim_sent", "claim_answered")
    _stamp_before(worker_module.WorkerProcess, "_execute", "execute")
    _stamp_before(worker_module, "run_handler", "run_handler")

    @handler("latency_probe")
    def latency_probe(payload: dict[str, float], job: JobContext) -> None:
        _write(payload["sent"], WORKER_STEPS, time.time())


def gateway_app() -> Any:
    """Return the gateway's app with its steps timed (a request with X-Sent is measured)."""
    import gateway.http_worker as http_worker
    from gateway import create_app

    worker = http_worker.HeadReadingWorker
    _stamp_before(worker, "_readable", "readable")
    _stamp_before(worker, "_hand_over", "handed_over")
    _stamp_before(worker, "handle", "thread")
    _stamp_before(worker, "handle_request", "parsed")
    _stamp_around(Scripts, "enqueue", "enqueue_sent", "enqueue_answered")
    app = create_app()
    inner = app.wsgi_app

    def timed(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        _stamps["wsgi"] = time.time()
        body = inner(environ, start_response)
        sent = environ.get("HTTP_X_SENT")
        if sent:
            _write(float(sent), GATEWAY_STEPS, time.time())
        else:
            _stamps.clear()
        return body

    app.wsgi_app = timed  # type: ignore[method-assign]
    return app


if os.environ.get("TASKFORGE_HANDLERS", "").endswith("bench.latency_probe"):
    _probe_worker()
