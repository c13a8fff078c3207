"""JSON-lines logging: one schema, extras kept, payloads dropped, error text capped."""

from __future__ import annotations

import datetime
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pythonjsonlogger.json import JsonEncoder

from shared.model.jobs import JobState
from shared.obs import log

TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Put the root logger back as it was, so configure() does not leak into other tests."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    log._configured = None


def lines(out: str) -> list[dict[str, Any]]:
    """Parse captured stdout: every line must be one JSON object."""
    return [json.loads(line) for line in out.splitlines()]


@pytest.mark.usefixtures("restore_logging")
def test_every_line_is_one_json_object_with_the_schema_fields_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    log.configure("gateway")
    logging.getLogger("taskforge.test").info(
        "job_enqueued", extra={"job_id": "j1", "type": "echo", "attempt": 1}
    )
    logging.getLogger("other").warning("job_dead", extra={"error": "ValueError: x"})
    first, second = lines(capsys.readouterr().out)
    assert list(first)[:6] == ["ts", "level", "event", "logger", "service", "pid"]
    assert TS.fullmatch(first["ts"])
    assert first["level"] == "INFO"
    assert first["event"] == "job_enqueued"
    assert first["logger"] == "taskforge.test"
    assert first["service"] == "gateway"
    assert first["pid"] == os.getpid()
    assert (first["job_id"], first["type"], first["attempt"]) == ("j1", "echo", 1)
    assert (second["level"], second["event"], second["error"]) == (
        "WARNING",
        "job_dead",
        "ValueError: x",
    )


@pytest.mark.usefixtures("restore_logging")
def test_threads_logging_at_once_write_whole_lines(capsys: pytest.CaptureFixture[str]) -> None:
    log.configure("workerd")
    logger = logging.getLogger("t")

    def many(thread: int) -> None:
        for n in range(200):
            logger.info("job_started", extra={"job_id": f"{thread}-{n}", "pad": "x" * 300})

    threads = [threading.Thread(target=many, args=(k,)) for k in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    records = lines(capsys.readouterr().out)
    assert sorted(r["job_id"] for r in records) == sorted(
        f"{k}-{n}" for k in range(8) for n in range(200)
    )


@pytest.mark.usefixtures("restore_logging")
def test_payload_extra_is_dropped(capsys: pytest.CaptureFixture[str]) -> None:
    log.configure("workerd")
    logging.getLogger("t").info("job_started", extra={"job_id": "j2", "payload": {"card": "4111"}})
    (record,) = lines(capsys.readouterr().out)
    assert "payload" not in record
    assert "4111" not in json.dumps(record)
    assert record["job_id"] == "j2"


def test_drop_payload_filter_removes_the_attribute_and_keeps_the_record() -> None:
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "job_started", None, None)
    record.payload = {"secret": 1}
    assert log.DropPayload().filter(record) is True
    assert not hasattr(record, "payload")


@pytest.mark.usefixtures("restore_logging")
def test_level_filters_and_configure_is_idempotent(capsys: pytest.CaptureFixture[str]) -> None:
    log.configure("workerd", "warning")
    root_handlers = logging.getLogger().handlers[:]
    log.configure("workerd", "WARNING")
    assert logging.getLogger().handlers == root_handlers
    logging.getLogger("t").info("job_claimed")
    logging.getLogger("t").error("job_timed_out")
    assert [r["event"] for r in lines(capsys.readouterr().out)] == ["job_timed_out"]


@pytest.mark.usefixtures("restore_logging")
def test_loggers_created_before_configure_still_log(capsys: pytest.CaptureFixture[str]) -> None:
    early = logging.getLogger("shared.early_module")
    log.configure("gateway")
    early.info("gateway_started")
    assert lines(capsys.readouterr().out)[0]["logger"] == "shared.early_module"


@pytest.mark.usefixtures("restore_logging")
def test_exception_traceback_stays_inside_the_json_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    log.configure("workerd")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("t").exception("job_dead")
    (record,) = lines(capsys.readouterr().out)
    assert "RuntimeError: boom" in str(record["exc_info"])


def test_events_hold_the_lifecycle_vocabulary() -> None:
    assert {"job_enqueued", "job_stale_ack", "supervisor_stopped", "gateway_started"} <= log.EVENTS
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)+", event) for event in log.EVENTS)


def test_every_event_the_code_logs_is_in_the_vocabulary() -> None:
    root = Path(__file__).resolve().parent.parent
    # The event may start the call's next line (a call ruff format split): \s* after "(".
    call = re.compile(
        r'log\.(?:debug|info|warning|error|exception|log)\(\s*(?:logging\.[A-Z]+,\s*)?"([a-z_]+)"'
    )
    used = {
        event
        for package in ("shared", "gateway", "workerd")
        for source in (root / package).rglob("*.py")
        for event in call.findall(source.read_text())
    }
    assert used, "the pattern found no log call: it is out of date"
    assert "child_thread_stuck" in used, "the pattern misses a call split over lines"
    assert used <= log.EVENTS, (
        f"log events missing from shared.obs.log.EVENTS: {sorted(used - log.EVENTS)}"
    )


def test_error_text_names_the_type_and_message() -> None:
    assert log.error_text(ValueError("bad input")) == "ValueError: bad input"
    assert log.error_text(KeyError()) == "KeyError"


def test_error_text_caps_length_with_an_ellipsis() -> None:
    text = log.error_text(RuntimeError("x" * 10_000))
    assert len(text) == log.ERROR_TEXT_LIMIT == 500
    assert text.startswith("RuntimeError: xxx")
    assert text.endswith("…")
    assert len(log.error_text(RuntimeError("y" * 100), limit=20)) == 20


def test_error_text_survives_a_broken_str() -> None:
    class Nasty(Exception):
        def __str__(self) -> str:
            raise TypeError("no")

    assert log.error_text(Nasty()) == "Nasty: <unprintable>"


def test_lines_are_what_python_json_logger_would_write_for_them() -> None:
    """Our formatter replaced JsonFormatter for speed; the text of every line stays the same."""
    import datetime
    import enum
    import sys

    from pythonjsonlogger.json import JsonFormatter

    class Reference(JsonFormatter):
        """The formatter as configured before: renamed fields, then head fields first."""

        def add_fields(self, data: dict[str, Any], record: Any, message: dict[str, Any]) -> None:
            super().add_fields(data, record, message)
            head = {"ts": log._Formatter("x")._ts(record)}
            head.update(
                (key, data.pop(key, None)) for key in ("level", "event", "logger", "service", "pid")
            )
            rest = dict(data)
            data.clear()
            data.update(head, **rest)

    renames = {"levelname": "level", "message": "event", "name": "logger", "process": "pid"}
    reference = Reference(
        "%(levelname)s %(message)s %(name)s %(process)d",
        rename_fields=renames,
        static_fields={"service": "gateway"},
    )
    ours = log._Formatter("gateway")

    class Color(enum.Enum):
        RED = "red"

    logger = logging.getLogger("tests.reference")
    extra = {"job_id": "j", "n": 3, "items": [1, "é"], "color": Color.RED, "raw": b"\x00\xff"}
    extra["when"] = datetime.datetime(2026, 1, 2, 3, 4, 5)
    records = [logger.makeRecord("tests.reference", 20, "f", 1, "job_enqueued", (), None, extra)]
    try:
        raise ZeroDivisionError("boom")
    except ZeroDivisionError:
        records.append(
            logger.makeRecord("t", 40, "f", 1, "unhandled_error", (), sys.exc_info(), {"e": 1})
        )
    records.append(logger.makeRecord("t", 30, "f", 1, "a %s", ("b",), None, sinfo="Stack: x"))
    for record in records:
        assert ours.format(record) == reference.format(record)


def test_a_line_is_encoded_as_python_json_loggers_encoder_would() -> None:
    # The formatter makes its C encoder once (bench.job_parts): the same text as the encoder's
    # own encode(), whatever the values (dates, enums and exceptions go through its default).
    formatter = log._Formatter("t")
    values = {
        "when": datetime.datetime(2026, 12, 6, 11, 0, tzinfo=datetime.UTC),
        "state": JobState.COMPLETED,
        "error": ValueError("boom"),
        "nested": {"job_ids": ["a", "b"], "n": 1.5, "none": None, "yes": True},
        "text": 'café \u2603 "quoted"\n',
        "nan": float("nan"),
    }
    assert formatter._encode(values) == JsonEncoder().encode(values)


@pytest.mark.parametrize(
    ("name", "message", "args", "extra", "process"),
    [
        ("shared.engine.lifecycle", "job_started", (), {"job_id": "j", "attempt": 1}, 42),
        ("t", "job_completed", (), {}, 42),
        ("a, b", "caf\u00e9 %s", ('"x"',), {"n": [1, "\u00e9"], "none": None}, None),
        ("t", "job_dead", (), {"service": "other", "job_id": "j"}, 7),  # a head field's name
        ("t", "job_dead", (), {"event": "x", "pid": 1, "ts": "t"}, 7),
    ],
)
def test_a_line_rendered_from_its_cached_head_is_the_whole_dicts_line(
    name: str, message: str, args: tuple[object, ...], extra: dict[str, Any], process: int | None
) -> None:
    # format renders the head once per logger, level and process; _format_whole is the line
    # as one dict, the reference test's equal: both the same text, twice in a row (cached).
    formatter = log._Formatter("workerd")
    record = logging.LogRecord(name, logging.INFO, "f", 1, message, args, None)
    record.__dict__.update(extra)
    record.process = process
    for _ in range(2):
        assert formatter.format(record) == formatter._format_whole(record)
        json.loads(formatter.format(record))


# write_direct: a line without a LogRecord where configure()'s handler alone would see it. -----


def _direct_and_logged(
    capsys: pytest.CaptureFixture[str], name: str, level: int, fields: dict[str, Any]
) -> tuple[bool, str, str]:
    """Write one line directly and log the same through logging; return whether the direct
    write happened and both lines, their ts blanked (a millisecond may pass between them)."""
    logger = logging.getLogger(name)
    written = log.write_direct(logger, level, "job_completed", dict(fields))
    logger.log(level, "job_completed", extra=dict(fields))
    out = TS.sub("T", capsys.readouterr().out)
    direct, logged = out.splitlines() if written else ("", out.strip())
    return written, direct, logged


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize(
    "fields",
    [
        {"job_id": "j", "type": "demo.noop", "queue": "default", "attempt": 1},
        {"job_id": "j", "duration_ms": 0.125, "worker_id": "h-1-w0", "nested": {"a": [1, "é"]}},
        {"job_id": "j", "payload": {"secret": "s"}, "_private": 1, "attempt": None},
        {},
    ],
)
def test_a_direct_line_is_the_line_logging_writes(
    capsys: pytest.CaptureFixture[str], fields: dict[str, Any]
) -> None:
    log.configure("workerd")  # pytest's own capture handler leaves the root here
    written, direct, logged = _direct_and_logged(
        capsys, "shared.engine.lifecycle", logging.INFO, fields
    )
    assert written
    assert direct == logged
    assert "secret" not in direct and "_private" not in direct


@pytest.mark.usefixtures("restore_logging")
def test_a_direct_line_carries_the_active_spans_ids_as_the_filter_adds_them(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    log.configure("workerd")
    monkeypatch.setattr(log.tracing, "current_ids", lambda: ("a" * 32, "b" * 16))
    written, direct, logged = _direct_and_logged(
        capsys, "shared.engine.lifecycle", logging.INFO, {"job_id": "j", "payload": 1}
    )
    assert written and direct == logged
    assert json.loads(direct)["trace_id"] == "a" * 32


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize(
    "change",
    [
        "another root handler",
        "a handler on the way",
        "a filter on the logger",
        "not propagated",
        "the handler's level",
        "another formatter",
        "a field named as a head field",
        "a field a record refuses",
        "not configured",
    ],
)
def test_anything_else_that_would_see_the_record_gets_it_the_usual_way(
    capsys: pytest.CaptureFixture[str], change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    log.configure("workerd")
    logger = logging.getLogger("tests.direct.child")
    parent = logging.getLogger("tests.direct")
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    fields: dict[str, Any] = {"job_id": "j"}
    handler = logging.root.handlers[0]
    if change == "another root handler":
        logging.root.addHandler(Keep())
    elif change == "a handler on the way":
        parent.addHandler(Keep())
        monkeypatch.setattr(parent, "handlers", parent.handlers)  # removed after the test
    elif change == "a filter on the logger":
        logger.addFilter(lambda record: True)
    elif change == "not propagated":
        monkeypatch.setattr(logger, "propagate", False)
    elif change == "the handler's level":
        monkeypatch.setattr(handler, "level", logging.WARNING)
    elif change == "another formatter":
        monkeypatch.setattr(handler, "formatter", logging.Formatter())
    elif change == "a field named as a head field":
        fields["service"] = "other"
    elif change == "a field a record refuses":
        fields["msg"] = "x"
    elif change == "not configured":
        monkeypatch.setattr(log, "_direct", None)
    try:
        assert not log.write_direct(logger, logging.INFO, "job_completed", fields)
        assert capsys.readouterr().out == ""
    finally:
        parent.handlers.clear()
        logger.filters.clear()


@pytest.mark.usefixtures("restore_logging")
def test_a_failed_direct_write_is_left_to_logging(monkeypatch: pytest.MonkeyPatch) -> None:
    log.configure("workerd")

    class Broken:
        def write(self, text: str) -> None:
            raise OSError("stdout gone")

    monkeypatch.setattr("sys.stdout", Broken())
    logger = logging.getLogger("shared.engine.lifecycle")
    assert not log.write_direct(logger, logging.INFO, "job_completed", {"job_id": "j"})
    # The handler's lock was let go: another thread takes it at once.
    lock = logging.root.handlers[0].lock
    assert lock is not None
    taken: list[bool] = []

    def take() -> None:
        taken.append(lock.acquire(timeout=5))
        lock.release()

    thread = threading.Thread(target=take)
    thread.start()
    thread.join(timeout=10)
    assert taken == [True]


@pytest.mark.usefixtures("restore_logging")
def test_a_value_the_line_cannot_hold_is_left_to_logging(
    capsys: pytest.CaptureFixture[str],
) -> None:
    log.configure("workerd")
    logger = logging.getLogger("shared.engine.lifecycle")
    # A dict keyed by a tuple: JSON cannot hold it. The direct path must not raise into the
    # worker; logging's path reports the error on stderr and goes on.
    assert not log.write_direct(logger, logging.INFO, "job_completed", {"bad": {(1, 2): 1}})
    assert capsys.readouterr().out == ""


@pytest.mark.usefixtures("restore_logging")
def test_a_direct_line_names_the_forked_process_that_wrote_it() -> None:
    log.configure("workerd")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its line, then out at once (no pytest teardown here)
        try:
            os.close(read_end)
            sys.stdout = os.fdopen(write_end, "w")
            logger = logging.getLogger("shared.engine.lifecycle")
            written = log.write_direct(logger, logging.INFO, "job_started", {"job_id": "j"})
            sys.stdout.flush()
        finally:
            os._exit(0 if written else 3)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        out = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert [line["pid"] for line in lines(out)] == [pid]


@pytest.mark.usefixtures("restore_logging")
def test_a_direct_line_whose_flush_fails_is_written_once(monkeypatch: pytest.MonkeyPatch) -> None:
    log.configure("workerd")
    written: list[str] = []

    class FlushFails:
        def write(self, text: str) -> None:
            written.append(text)

        def flush(self) -> None:
            raise OSError("disk full")

    monkeypatch.setattr("sys.stdout", FlushFails())
    logger = logging.getLogger("shared.engine.lifecycle")
    log.log_line(logger, logging.INFO, "job_completed", {"job_id": "j"})
    assert [json.loads(text)["event"] for text in written] == ["job_completed"]
