"""Configure JSON-lines logging with one schema for every TaskForge process.

Each line on stdout is one JSON object: ``ts`` (RFC 3339 UTC, milliseconds, ``Z``),
``level``, ``event`` (the message, e.g. ``job_enqueued``), ``logger``, ``service``,
``pid``, then the ``extra=`` fields of the call (``job_id``, ``type``, ``queue``, ``attempt``,
``worker_id``, ``duration_ms``, ``error`` ...). Payloads are never logged.
"""

from __future__ import annotations

import contextlib
import logging
import logging.config
import os
import sys
import time
from collections.abc import Callable
from json.encoder import (  # type: ignore[attr-defined]
    c_make_encoder,
    encode_basestring,
    encode_basestring_ascii,
)
from typing import Any, TextIO

from pythonjsonlogger.core import RESERVED_ATTRS
from pythonjsonlogger.json import JsonEncoder

from shared.obs import tracing

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
        "job_cancel_requested",
        "cancel_signaled",
        "job_purged",
        "job_recovered",
        "job_released",
        "job_timed_out",
        "job_stale_ack",
        "lifecycle_sink_failed",
        "metrics_flush_failed",
        "ack_flush_failed",
        "scheduler_started",
        "scheduler_stopped",
        "worker_started",
        "worker_stopped",
        "worker_process_stopped",
        "worker_waits_alone",
        "worker_batch_off",
        "supervisor_started",
        "supervisor_stopped",
        "gateway_started",
        "gateway_stopped",
        # workerd's supervision and outage events
        "supervisor_ready",
        "supervisor_stopping",
        "supervisor_hurry",
        "supervisor_halted",
        "supervisor_reloading",
        "supervisor_quiet",
        "supervisor_resumed",
        "reload_check",
        "reload_failed",
        "child_spawned",
        "child_exited",
        "child_killed",
        "child_silent",
        "child_thread_stuck",  # a job thread between jobs stopped beating; its process drains
        "child_thread_unstuck",
        "child_crashed",
        "lease_lost",
        "lease_renewal_failed",
        "claim_too_old",  # a claim read past half its lease (a stalled host): not started
        "requeue_abandoned",
        "job_promoted",
        "queues_relisted",
        # the scheduler at scale of names (docs/WORKERD.md): the sweep's repairs
        "due_index_repaired",
        "served_queue_adopted",
        # the gateway's cached fleet view (gateway/fleet_view.py), for enqueue warnings
        "fleet_view_failed",
        "fleet_view_recovered",
        "redis_unavailable",
        "redis_available",
        "write_not_replicated",  # durable mode: a completion or tick no replica confirmed
        "scripts_not_loaded",
        "config_warning",
        "redis_url_defaulted",
        # routing: a worker leaves a job to hosts that run its type, or takes it (none does)
        "left_for_other_hosts",
        "no_host_runs_type",
        "queue_unreachable",  # a queue's claims fail (Cluster: its master down); others go on
        # the gateway's own lines
        "unhandled_error",
        "http_request",
        "open_files_limit_raised",
        "worker_connections_lowered",
        "connections_closed_early",  # head-readers closed late (gateway/http_worker.py)
        "auth_lockout",
        # operator actions through the API (queues, workerd hosts)
        "queue_paused",
        "limits_changed",
        "queue_resumed",
        "quiet_requested",
        "resume_requested",
        "queue_deleted",
        # the summary of every queue that the overview, /stats and /metrics show past a page
        "queues_swept",
        "queues_sweep_failed",
        # live events (GET /events): a stream's or the tail's Redis read failed
        "events_read_failed",
        "events_tail_error",
        "events_tail_failed",
        # periodic schedules (docs/SCHEDULES.md)
        "schedules_published",
        "schedule_missed",
        "schedule_failed",
        "schedule_paused",
        "schedule_resumed",
        # the dashboard's login (never the token given)
        "ui_login",
        "ui_login_failed",
        "ui_logout",
    }
)

# Stored handler errors are capped: a handler can raise with a megabyte of text, and the
# error lands in the job hash, the DLQ listing and a log line.
ERROR_TEXT_LIMIT = 500

# The User-Agent of bin/run's own readiness polls. The gateway's access log leaves out a
# GET /ready sent with it: a wait for Redis would otherwise bury bin/run's "still waiting for
# Redis" line under a request line per poll. Any other client's /ready is logged.
READY_PROBE_AGENT = "taskforge-bin-run-ready-probe"

# A LogRecord's own attributes; everything else on a record came from ``extra=``.
_RECORD_ATTRS = frozenset(RESERVED_ATTRS) | {"taskName"}
_configured: tuple[str, str] | None = None
# A line's head fields, always first and in this order.
_HEAD = frozenset({"ts", "level", "event", "logger", "service", "pid"})


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


class _Formatter(logging.Formatter):
    """Render a record as one JSON object: ts, level, event, logger, service, pid, extras.

    Built here rather than by python-json-logger's JsonFormatter, which rebuilds a dict per
    record (bench/MEASUREMENTS.md); its encoder still renders datetimes, enums and exceptions.
    """

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service
        self.encoder = JsonEncoder()  # the stdlib defaults: ASCII, ", " and ": "
        self._encode = _one_shot_encoder(self.encoder)
        # (second, its text): strftime once a second, not once a line. One tuple, replaced
        # whole, so threads logging across a second's turn never pair a second with another
        # second's text.
        self._stamp: tuple[int, str] = (-1, "")
        # (level, logger, pid) -> the head's text around the event (see format).
        self._heads: dict[tuple[str, str, int | None], tuple[str, str]] = {}
        self._encode_text = (
            encode_basestring_ascii if self.encoder.ensure_ascii else encode_basestring
        )

    def _ts(self, record: logging.LogRecord) -> str:
        return self._stamp_text(record.created, record.msecs)

    def _stamp_text(self, created: float, msecs: float) -> str:
        second, text = self._stamp
        if second != int(created):
            second = int(created)
            text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._stamp = (second, text)
        return f"{text}.{int(msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        """Return the record as one line of JSON."""
        extras = {
            key: value
            for key, value in record.__dict__.items()
            if key not in _RECORD_ATTRS and key[:1] != "_"
        }
        if record.exc_info or record.exc_text or record.stack_info or not _HEAD.isdisjoint(extras):
            return self._format_whole(record)
        return self.line(
            record.levelname,
            record.name,
            record.process,
            record.created,
            record.msecs,
            record.getMessage(),
            extras,
        )

    def line(
        self,
        level: str,
        logger: str,
        pid: int | None,
        created: float,
        msecs: float,
        event: str,
        extras: dict[str, Any],
    ) -> str:
        """Return one line of JSON from its parts: a record's (format) or a direct line's
        (write_direct). No extra may be named as a head field (_format_whole renders those)."""
        # The head's text but for ts and event is the same for every line of one logger at one
        # level in one process: rendered once (the same text _format_whole's dict gives it).
        key = (level, logger, pid)
        head = self._heads.get(key)
        if head is None:
            level_text, logger_text, service, pid_text = (
                self._encode(value) for value in (level, logger, self.service, pid)
            )
            head = self._heads[key] = (
                f'", "level": {level_text}, "event": ',
                f', "logger": {logger_text}, "service": {service}, "pid": {pid_text}',
            )
        tail = ", " + self._encode(extras)[1:] if extras else "}"
        ts = self._stamp_text(created, msecs)
        return f'{{"ts": "{ts}{head[0]}{self._encode_text(event)}{head[1]}{tail}'

    def _format_whole(self, record: logging.LogRecord) -> str:
        """Return the record as one line of JSON, built as one dict (a line with a traceback,
        a stack, or an extra named as a head field, which then takes that field's place)."""
        line: dict[str, Any] = {
            "ts": self._ts(record),
            "level": record.levelname,
            "event": record.getMessage(),
            "logger": record.name,
            "service": self.service,
            "pid": record.process,
        }
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc_info"] = record.exc_text
        if record.stack_info:
            line["stack_info"] = self.formatStack(record.stack_info)
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRS and key[:1] != "_":
                line[key] = value
        return self._encode(line)


def _one_shot_encoder(encoder: JsonEncoder) -> Callable[[dict[str, Any]], str]:
    """Return `encoder.encode` with its C encoder made once, not once per line (0.8 µs of a
    line's 9, bench.job_parts). Its output is the same: the same separators, ASCII escaping
    and `default`; a line holds values the code chose, never a cycle: no circular check."""
    if c_make_encoder is None:  # an interpreter without the C accelerator
        return encoder.encode
    chunks = c_make_encoder(
        None,  # markers: no circular check
        encoder.default,
        encode_basestring_ascii if encoder.ensure_ascii else encode_basestring,
        None,  # indent
        encoder.key_separator,
        encoder.item_separator,
        encoder.sort_keys,
        encoder.skipkeys,
        encoder.allow_nan,
    )
    return lambda line: "".join(chunks(line, 0))


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


class _Direct:
    """The handler configure() set up, and how to tell that it alone receives a line."""

    def __init__(self, handler: logging.Handler) -> None:
        self.handler = handler
        self.formatter = handler.formatter
        self.filters = tuple(handler.filters)

    def alone(self, logger: logging.Logger, level: int) -> bool:
        """Tell whether a record of `logger` at `level` would reach this handler alone, its
        filters and formatter those configure() gave it: nothing else would see it."""
        node: Any = logger
        root = logging.root
        while node is not root:
            if node.handlers or node.filters or not node.propagate:
                return False
            node = node.parent
            if node is None:
                return False
        handler = self.handler
        handlers = root.handlers
        return (
            len(handlers) == 1
            and handlers[0] is handler
            and not root.filters
            and handler.level <= level
            and handler.formatter is self.formatter
            and tuple(handler.filters) == self.filters
        )


_direct: _Direct | None = None
# This process's id for the direct lines, kept: os.getpid() is a system call, and a worker
# writes two lines a job.
_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def write_direct(logger: logging.Logger, level: int, event: str, fields: dict[str, Any]) -> bool:
    """Write `event` with `fields` as `logger`'s line at `level` without a LogRecord, when
    configure()'s handler alone would receive the record; return whether it was written.

    The caller has checked ``logger.isEnabledFor(level)`` and logs the usual way when this
    returns False: another handler or filter anywhere on the way (pytest's caplog, an
    application's own), fields a record refuses or renders whole, a failed write. The line is
    the text the record would have made, filters included (tests/test_log.py compares them).
    Why: a worker writes two lines a job, and making a record and passing it through logging's
    loggers, handler and filters cost a third of a line (bench.job_parts, "an INFO line")."""
    direct = _direct
    if (
        direct is None
        or not _HEAD.isdisjoint(fields)
        or not _RECORD_ATTRS.isdisjoint(fields)
        or not direct.alone(logger, level)
    ):
        return False
    # The configured filters' work: DropPayload, TraceIds; and format's leaving out of "_" names.
    ids = tracing.current_ids()
    if ids is not None or "payload" in fields or _names_private(fields):
        fields = {k: v for k, v in fields.items() if k != "payload" and k[:1] != "_"}
        if ids is not None:
            fields["trace_id"], fields["span_id"] = ids
    created = time.time()
    formatter: Any = direct.formatter
    try:
        line = formatter.line(
            logging.getLevelName(level),
            logger.name,
            _pid if logging.logProcesses else None,
            created,
            (created - int(created)) * 1000,
            event,
            fields,
        )
    except Exception:
        return False  # a value JSON cannot hold: logging's own path reports it, and goes on
    handler: Any = direct.handler
    handler.acquire()
    try:
        stream = handler.stream
        try:
            stream.write(line + handler.terminator)
        except Exception:
            return False  # not written: logged the usual way, whose handler reports the failure
        # In the stream's buffer now: logging it again after a failed flush would write it
        # twice; the next flush of any line writes it. (A line-buffered stream, a terminal,
        # flushes inside write: its failure takes the fallback above, and the line may show
        # twice there.) Not reported here; a line through logging reports its own.
        with contextlib.suppress(Exception):
            stream.flush()
    finally:
        handler.release()
    return True


def log_line(logger: logging.Logger, level: int, event: str, fields: dict[str, Any]) -> None:
    """Log `event` with `fields`: written directly where configure()'s handler alone would see
    it (:func:`write_direct`), through logging otherwise. The caller has asked
    ``logger.isEnabledFor(level)``, before building `fields`."""
    if not write_direct(logger, level, event, fields):
        logger.log(level, event, extra=fields)


def _names_private(fields: dict[str, Any]) -> bool:
    """Tell whether a field's name starts with "_" (a line leaves those out). A loop: a
    generator's frame would cost more than the check."""
    for key in fields:  # noqa: SIM110
        if key[:1] == "_":
            return True
    return False


def configure(service: str, level: str = "INFO") -> None:
    """Send every logger's records to stdout as JSON lines tagged with ``service``; idempotent."""
    global _configured, _direct
    if _configured == (service, level.upper()):
        return
    # The lines carry neither source location nor thread names: skip collecting them (the
    # caller's stack walk is a log call's largest cost; the logging HOWTO's "Optimization").
    logging._srcfile = None  # type: ignore[attr-defined]
    logging.logThreads = False
    logging.logMultiprocessing = False
    logging.config.dictConfig(
        {
            "version": 1,
            # Module loggers (log = logging.getLogger(__name__)) exist before this runs.
            "disable_existing_loggers": False,
            "filters": {"drop_payload": {"()": DropPayload}, "trace_ids": {"()": TraceIds}},
            "formatters": {"json": {"()": _Formatter, "service": service}},
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
    _direct = _Direct(logging.root.handlers[0])
    _configured = (service, level.upper())


def error_text(exc: BaseException, limit: int = ERROR_TEXT_LIMIT) -> str:
    """Return ``"TypeName: message"`` for ``exc``, cut to ``limit`` characters with ``…``."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    try:
        message = str(exc)
    except Exception:  # a broken __str__ must not hide the original failure
        message = "<unprintable>"
    return error_line(type(exc).__name__, message, limit)


def unavailable_text(exc: BaseException, limit: int = 300) -> str:
    """Return why Redis is unavailable for a /ready body: the message alone (redis-py's name
    host and port, shared/connect/sentinels.py's the sentinels), or the type when it has none."""
    try:
        message = str(exc).strip()
    except Exception:
        message = ""
    text = message or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_line(kind: str, message: str, limit: int = ERROR_TEXT_LIMIT) -> str:
    """Return ``"Kind: message"`` (``"Kind"`` alone without one), cut to ``limit`` with ``…``."""
    text = f"{kind}: {message}" if message else kind
    return text if len(text) <= limit else text[: limit - 1] + "…"
