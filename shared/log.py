"""Configure JSON-lines logging with one schema for every TaskForge process.

Each line on stdout is one JSON object: ``ts`` (RFC 3339 UTC, milliseconds, ``Z``),
``level``, ``event`` (the message, e.g. ``job_enqueued``), ``logger``, ``service``,
``pid``, then the ``extra=`` fields of the call (``job_id``, ``type``, ``attempt``,
``worker_id``, ``duration_ms``, ``error`` ...). Payloads are never logged.
"""

from __future__ import annotations

import logging
import logging.config
import sys
import time
from typing import Any, TextIO

from pythonjsonlogger.json import JsonFormatter

from shared import tracing

# Lifecycle events: the ``event`` of every log line about a job or a process's life uses
# one of these names, so operators can grep and alert on a closed vocabulary.
EVENTS: frozenset[str] = frozenset(
    {
        "job_enqueued",
        "job_claimed",
        "job_started",
        "job_completed",
        "job_retry_scheduled",
        "job_dead",
        "job_replayed",
        "job_canceled",
        "job_purged",
        "job_recovered",
        "job_released",
        "job_timed_out",
        "job_stale_ack",
        "scheduler_started",
        "scheduler_stopped",
        "worker_started",
        "worker_stopped",
        "supervisor_started",
        "supervisor_stopped",
        "gateway_started",
        "gateway_stopped",
        # workerd's supervision and outage events
        "supervisor_ready",
        "supervisor_stopping",
        "supervisor_hurry",
        "supervisor_halted",
        "child_spawned",
        "child_exited",
        "child_killed",
        "child_silent",
        "child_crashed",
        "lease_lost",
        "lease_renewal_failed",
        "requeue_abandoned",
        "job_promoted",
        "redis_unavailable",
        "redis_available",
        "scripts_not_loaded",
        "config_warning",
        "redis_url_defaulted",
        # the gateway's own lines
        "unhandled_error",
        "http_request",
    }
)

# Stored handler errors are capped: a handler can raise with a megabyte of text, and the
# error lands in the job hash, the DLQ listing and a log line.
ERROR_TEXT_LIMIT = 500

_HEAD = ("ts", "level", "event", "logger", "service", "pid")
_RENAMES = {"levelname": "level", "message": "event", "name": "logger", "process": "pid"}
_configured: tuple[str, str] | None = None


class DropPayload(logging.Filter):
    """Drop a record's ``payload`` attribute: job payloads may hold secrets (defence in depth)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Remove ``payload`` from the record and let the record through."""
        record.__dict__.pop("payload", None)
        return True


class TraceIds(logging.Filter):
    """Add ``trace_id`` and ``span_id`` to a record made inside an active span."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Tag the record with the active span's ids, if any; let it through."""
        ids = tracing.current_ids()
        if ids is not None:
            record.trace_id, record.span_id = ids
        return True


class _Formatter(JsonFormatter):
    """Render a record as one JSON object whose first keys are always ``_HEAD``."""

    def add_fields(
        self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]
    ) -> None:
        """Add the schema's fields, in schema order, before the extras."""
        super().add_fields(log_data, record, message_dict)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        head = {"ts": f"{stamp}.{int(record.msecs):03d}Z"}
        head.update((key, log_data.pop(key, None)) for key in _HEAD[1:])
        rest = dict(log_data)
        log_data.clear()
        log_data.update(head, **rest)


class _StdoutHandler(logging.StreamHandler):
    """Write to whatever ``sys.stdout`` is at emit time, not at configure time."""

    # pytest's capture and gunicorn's --capture-output swap sys.stdout after start-up;
    # a stream bound once would keep writing to the old one.
    @property
    def stream(self) -> TextIO:
        """Return the current standard output."""
        return sys.stdout

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        """Ignore the stream StreamHandler.__init__ assigns."""


def configure(service: str, level: str = "INFO") -> None:
    """Send every logger's records to stdout as JSON lines tagged with ``service``; idempotent."""
    global _configured
    if _configured == (service, level.upper()):
        return
    logging.config.dictConfig(
        {
            "version": 1,
            # Module loggers (log = logging.getLogger(__name__)) exist before this runs.
            "disable_existing_loggers": False,
            "filters": {"drop_payload": {"()": DropPayload}, "trace_ids": {"()": TraceIds}},
            "formatters": {
                "json": {
                    "()": _Formatter,
                    "fmt": "%(levelname)s %(message)s %(name)s %(process)d",
                    "rename_fields": _RENAMES,
                    "static_fields": {"service": service},
                }
            },
            "handlers": {
                "stdout": {
                    "()": _StdoutHandler,
                    "formatter": "json",
                    "filters": ["drop_payload", "trace_ids"],
                }
            },
            "root": {"level": level.upper(), "handlers": ["stdout"]},
        }
    )
    _configured = (service, level.upper())


def error_text(exc: BaseException, limit: int = ERROR_TEXT_LIMIT) -> str:
    """Return ``"TypeName: message"`` for ``exc``, cut to ``limit`` characters with ``…``."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not hide the original failure
        message = "<unprintable>"
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"
