"""The README demo's job types (generate_pdf, send_email, resize_image), plus misbehaving ones.

Loaded with TASKFORGE_HANDLERS=workerd.demo (bin/run's default). The misbehaving types, for
tests and benchmarks, are named ``demo.*``: generic names such as ``sleep`` or ``flaky`` belong
to the user's own modules, which may be loaded beside this one.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from workerd.handler_registry import JobContext, handler


def _simulate(seconds: float) -> None:
    time.sleep(seconds)


@handler("generate_pdf")
def generate_pdf(payload: Any, job: JobContext) -> dict[str, Any]:
    """Pretend to render a PDF (tens of milliseconds)."""
    _simulate(0.03)
    return {"pages": 1, "bytes": 2048}


@handler("send_email")
def send_email(payload: Any, job: JobContext) -> dict[str, Any]:
    """Pretend to send an email (tens of milliseconds)."""
    _simulate(0.02)
    return {"delivered": True}


@handler("resize_image")
def resize_image(payload: Any, job: JobContext) -> dict[str, Any]:
    """Pretend to resize an image (tens of milliseconds)."""
    _simulate(0.04)
    return {"width": 640, "height": 480}


@handler("demo.noop")
def noop(payload: Any, job: JobContext) -> None:
    """Do nothing (benchmarks)."""


@handler("demo.sleep")
def sleep(payload: Any, job: JobContext) -> dict[str, float]:
    """Sleep for payload["seconds"] (default 1)."""
    seconds = float(payload.get("seconds", 1)) if isinstance(payload, dict) else 1.0
    time.sleep(seconds)
    return {"slept": seconds}


@handler("demo.fail")
def fail(payload: Any, job: JobContext) -> None:
    """Always fail, with payload["error"] as the message."""
    message = payload.get("error", "failed on purpose") if isinstance(payload, dict) else None
    raise RuntimeError(message or "failed on purpose")


@handler("demo.flaky")
def flaky(payload: Any, job: JobContext) -> dict[str, int]:
    """Fail while the attempt is at most payload["fail_times"], then succeed."""
    fail_times = int(payload.get("fail_times", 1)) if isinstance(payload, dict) else 1
    if job.attempt <= fail_times:
        raise RuntimeError(f"flaky failure on attempt {job.attempt} of {fail_times} planned")
    return {"succeeded_on_attempt": job.attempt}


@handler("demo.crash")
def crash(payload: Any, job: JobContext) -> None:
    """Kill the worker process running it, as a segfault or the OOM killer would."""
    os.kill(os.getpid(), signal.SIGKILL)
