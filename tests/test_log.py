"""JSON-lines logging: one schema, extras kept, payloads dropped, error text capped."""

from __future__ import annotations

import datetime
import json
import logging
import os
import re
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
    call = re.compile(
        r'log\.(?:debug|info|warning|error|exception|log)\((?:logging\.[A-Z]+,\s*)?"([a-z_]+)"'
    )
    used = {
        event
        for package in ("shared", "gateway", "workerd")
        for source in (root / package).rglob("*.py")
        for event in call.findall(source.read_text())
    }
    assert used, "the pattern found no log call: it is out of date"
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
