"""shared.model.jobs: validation of an enqueue request, and the job's JSON shape."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.model.job_ids import new_client_id, new_job_id, queue_tag
from shared.model.jobs import (
    DURATION_PATTERN,
    LIFECYCLE_FIELDS,
    MAX_DELAY_SECONDS,
    MAX_TIMEOUT_SECONDS,
    TRACEBACK_LIMIT,
    EnqueueRequest,
    Job,
    JobState,
    ValidationError,
    cap_traceback,
    format_ms,
    validate_enqueue,
)
from shared.settings.config import Settings

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def errors_of(body: Any) -> dict[str, str]:
    """Return field → message for every problem validate_enqueue finds in `body`."""
    with pytest.raises(ValidationError) as raised:
        validate_enqueue(body)
    return {e.field: e.message for e in raised.value.errors}


def test_job_states_are_the_seven_canonical_strings() -> None:
    assert [str(s) for s in JobState] == [
        "pending",
        "scheduled",
        "processing",
        "retrying",
        "completed",
        "dead",
        "canceled",
    ]


def test_a_minimal_request_gets_every_default() -> None:
    assert validate_enqueue({"type": "email.send"}) == EnqueueRequest(
        type="email.send",
        payload_json="{}",
        priority=0,
        max_retries=3,
        scheduled_at_ms=None,
        timeout=None,
    )


def test_a_full_request_is_normalised() -> None:
    body = {
        "type": "a.b:c-d_E9",
        "payload": {"to": "x@example.com", "n": [1, 2]},
        "priority": -7,
        "max_retries": 10,
        "scheduled_at": "2026-01-01T01:00:00+01:00",
        "timeout": 30,
    }

    assert validate_enqueue(body) == EnqueueRequest(
        type="a.b:c-d_E9",
        payload_json='{"to":"x@example.com","n":[1,2]}',
        priority=-7,
        max_retries=10,
        scheduled_at_ms=T0,
        timeout=30.0,
    )


@pytest.mark.parametrize("body", [[], "x", None, 3, [("type", "t")]])
def test_a_body_that_is_not_an_object_is_refused(body: Any) -> None:
    assert errors_of(body) == {"body": "must be a JSON object"}


def test_type_is_required() -> None:
    assert errors_of({"payload": {}}) == {"type": "is required"}


@pytest.mark.parametrize(
    "job_type",
    ["", "a b", "x" * 129, "é", "a/b", "a\n", 7, True, ["t"], {"t": 1}],
    ids=repr,
)
def test_type_outside_the_safe_grammar_is_refused(job_type: Any) -> None:
    assert "type" in errors_of({"type": job_type})


@pytest.mark.parametrize("job_type", ["t", "x" * 128, "A-Z_a.z:0-9", "-", "..."])
def test_type_inside_the_safe_grammar_is_accepted(job_type: str) -> None:
    assert validate_enqueue({"type": job_type}).type == job_type


@pytest.mark.parametrize("payload", [{}, {"a": {"b": [None, 1.5]}}, {"": [[], "x", 0]}])
def test_payload_may_be_any_json_object(payload: Any) -> None:
    request = validate_enqueue({"type": "t", "payload": payload})

    assert json.loads(request.payload_json) == payload


def test_an_absent_payload_is_an_empty_object() -> None:
    assert validate_enqueue({"type": "t"}).payload_json == "{}"


# A handler reads its payload as a mapping (`"customer" not in payload`): anything else would
# raise inside it and be retried, so it is refused at the door instead.
@pytest.mark.parametrize("payload", [None, [], [{"a": 1}], "text", "", 0, 1.5, True], ids=repr)
def test_payload_that_is_not_an_object_is_refused_naming_the_field(payload: Any) -> None:
    assert errors_of({"type": "t", "payload": payload}) == {"payload": "must be a JSON object"}


@pytest.mark.parametrize("payload", [float("nan"), {"x": float("inf")}, {"x": object()}])
def test_payload_that_is_not_json_is_refused(payload: Any) -> None:
    assert "payload" in errors_of({"type": "t", "payload": payload})


@pytest.mark.parametrize("priority", [0, 1, -1, 2**31, -(2**31)])
def test_priority_within_plus_minus_2_to_the_31_is_accepted(priority: int) -> None:
    assert validate_enqueue({"type": "t", "priority": priority}).priority == priority


@pytest.mark.parametrize(
    "priority", [2**31 + 1, -(2**31) - 1, 2**53, 2.0**31 + 2, 1e300, True, False, 1.5, "1", None]
)
def test_priority_that_is_not_an_integer_in_bounds_is_refused(priority: Any) -> None:
    assert "priority" in errors_of({"type": "t", "priority": priority})


@pytest.mark.parametrize(
    ("field", "given", "stored"),
    [
        ("priority", 8.0, 8),
        ("priority", -7595.0, -7595),
        ("priority", -0.0, 0),
        ("priority", 1e2, 100),
        ("max_retries", 8.0, 8),
        ("max_retries", 1e2, 100),
    ],
)
def test_an_integer_written_with_a_zero_fraction_is_that_integer(
    field: str, given: float, stored: int
) -> None:
    # JSON Schema's integer, which the OpenAPI document promises: 8.0 is the integer 8.
    value = getattr(validate_enqueue({"type": "t", field: given}), field)
    assert (value, type(value)) == (stored, int)


@pytest.mark.parametrize("max_retries", [1, 2, 100])
def test_max_retries_from_1_to_100_is_accepted(max_retries: int) -> None:
    assert validate_enqueue({"type": "t", "max_retries": max_retries}).max_retries == max_retries


@pytest.mark.parametrize("max_retries", [0, -1, 101, True, 3.5, 101.0, "3", None])
def test_max_retries_outside_1_to_100_or_not_an_integer_is_refused(max_retries: Any) -> None:
    assert "max_retries" in errors_of({"type": "t", "max_retries": max_retries})


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("2026-01-01T00:00:00Z", T0),
        ("2026-01-01T00:00:00z", T0),
        ("2026-01-01t00:00:00Z", T0),
        ("2026-01-01T00:00:00.123Z", T0 + 123),
        ("2026-01-01T00:00:00.999Z", T0 + 999),
        ("2026-01-01T00:00:00+00:00", T0),
        ("2026-01-01T02:30:00+02:30", T0),
        ("2025-12-31T19:00:00-05:00", T0),
    ],
)
def test_scheduled_at_with_a_zone_is_read_to_the_millisecond(text: str, ms: int) -> None:
    assert validate_enqueue({"type": "t", "scheduled_at": text}).scheduled_at_ms == ms


def test_scheduled_at_null_means_now() -> None:
    assert validate_enqueue({"type": "t", "scheduled_at": None}).scheduled_at_ms is None


def test_scheduled_at_without_a_zone_is_refused_with_a_message_that_says_so() -> None:
    message = errors_of({"type": "t", "scheduled_at": "2026-01-01T00:00:00"})["scheduled_at"]

    assert "zone" in message


@pytest.mark.parametrize(
    "text",
    ["garbage", "", "2026-01-01", "2026-13-01T00:00:00Z", "2026-01-01 00:00:00Z", "T", 17, []],
    ids=repr,
)
def test_scheduled_at_that_is_not_a_timestamp_is_refused(text: Any) -> None:
    assert "scheduled_at" in errors_of({"type": "t", "scheduled_at": text})


@pytest.mark.parametrize(
    "text",
    [
        "2026-W01-4T00:00:00Z",  # ISO week date
        "20260101T000000Z",  # ISO basic format
        "2026-01-01T00:00Z",  # no seconds
        "2026-01-01T00Z",  # hour only
        "2026-01-01T00:00:00+01",  # offset without minutes
    ],
)
def test_scheduled_at_in_iso_forms_that_are_not_rfc3339_is_refused(text: str) -> None:
    assert "scheduled_at" in errors_of({"type": "t", "scheduled_at": text})


@pytest.mark.parametrize("timeout", [0.001, 1, 2.5, 7 * 24 * 3600])
def test_timeout_above_zero_and_at_most_a_week_is_accepted(timeout: float) -> None:
    assert validate_enqueue({"type": "t", "timeout": timeout}).timeout == float(timeout)


@pytest.mark.parametrize(
    ("timeout", "seconds"),
    [
        ("500ms", 0.5),
        ("2s", 2.0),
        ("1m", 60.0),
        ("1h", 3600.0),
        ("1d", 86400.0),
        ("7d", 7 * 24 * 3600.0),
        ("1.5m", 90.0),
        ("5", 5.0),  # bare seconds as text, as an environment variable holds them
        ("0.25", 0.25),
    ],
)
def test_timeout_takes_every_form_an_environment_duration_takes(
    timeout: str, seconds: float
) -> None:
    # The same text in TASK_DEFAULT_TIMEOUT means the same number of seconds.
    from_env = Settings.from_env({"TASK_DEFAULT_TIMEOUT": timeout}).default_job_timeout

    assert validate_enqueue({"type": "t", "timeout": timeout}).timeout == seconds == from_env


def test_a_timeout_given_as_text_and_as_seconds_is_the_same_request() -> None:
    as_text = validate_enqueue({"type": "t", "timeout": "2m"})
    as_number = validate_enqueue({"type": "t", "timeout": 120})

    assert as_text.canonical() == as_number.canonical()


@pytest.mark.parametrize(
    "timeout",
    [
        0,
        -1,
        7 * 24 * 3600 + 1,
        10**400,
        True,
        float("nan"),
        float("inf"),
        "0s",
        "0",
        "8d",
        "604801",
        "-1s",
        "5 s",
        " 5s",
        "5S",
        "1w",
        "1e3",
        ".5s",
        "",
        "s",
        "\u0663s",  # ARABIC-INDIC DIGIT THREE: a digit to `\d`, not to the API
        [5],
        {"seconds": 5},
    ],
    ids=repr,
)
def test_timeout_out_of_bounds_or_in_no_duration_form_is_refused_naming_it(timeout: Any) -> None:
    message = errors_of({"type": "t", "timeout": timeout})["timeout"]

    assert "500ms, 2s, 1m, 1h or 1d" in message and "604800" in message


def test_unknown_fields_are_refused_with_a_message_naming_them() -> None:
    errors = errors_of({"type": "t", "queue": "q", "after": 5, "queues": "q"})

    assert errors == {"after": "unknown field", "queues": "unknown field"}


@pytest.mark.parametrize("queue", ["critical", "low.priority-2", "Q_1", "x" * 64])
def test_a_queue_name_of_name_characters_is_accepted(queue: str) -> None:
    assert validate_enqueue({"type": "t", "queue": queue}).queue == queue


@pytest.mark.parametrize("queue", ["", "a:b", "{x}", "has space", "x" * 65, 5, None, ["a"]])
def test_a_bad_queue_name_is_refused_naming_the_rule(queue: object) -> None:
    errors = errors_of({"type": "t", "queue": queue})

    assert list(errors) == ["queue"]
    assert "1-64 characters" in errors["queue"]


def test_the_queue_defaults_to_default_and_is_part_of_the_idempotency_digest() -> None:
    plain = validate_enqueue({"type": "t"})
    low = validate_enqueue({"type": "t", "queue": "low"})

    assert plain.queue == "default"
    assert plain.canonical() != low.canonical()


@pytest.mark.parametrize("name", sorted(LIFECYCLE_FIELDS))
def test_each_lifecycle_field_is_refused_by_name(name: str) -> None:
    errors = errors_of({"type": "t", name: "x"})

    assert list(errors) == [name]
    assert "server" in errors[name]


def test_lifecycle_fields_are_named_one_by_one_and_apart_from_unknown_ones() -> None:
    errors = errors_of({"type": "t", "status": "done", "attempts": 2, "colour": "red"})

    assert errors == {
        "attempts": "set by the server and cannot be given by a client",
        "status": "set by the server and cannot be given by a client",
        "colour": "unknown field",
    }


def test_a_client_id_is_a_version_8_uuid_with_its_queues_tag_in_any_case() -> None:
    given = new_client_id("low")
    assert validate_enqueue({"type": "t", "queue": "low", "id": given.upper()}).id == given
    assert validate_enqueue({"type": "t"}).id is None
    server_made = new_job_id("default")  # version 4: never a client's
    assert "version 8" in errors_of({"type": "t", "id": server_made})["id"]
    assert errors_of({"type": "t", "id": 7})["id"] == "must be a string, not 7"
    tag = errors_of({"type": "t", "id": given})["id"]  # low's tag, in the default queue
    assert tag.startswith(f"must begin with {queue_tag('default')}")
    # The id is the request's name, not its meaning: the same job under two ids means the same.
    assert validate_enqueue({"type": "t", "id": new_client_id("default")}).canonical() == (
        validate_enqueue({"type": "t"}).canonical()
    )


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"type": 123}, "type", "must be a string, not 123"),
        ({"type": "t", "priority": "high"}, "priority", 'not "high"'),
        ({"type": "t", "priority": True}, "priority", "not true"),
        ({"type": "t", "max_retries": None}, "max_retries", "not null"),
        ({"type": "t", "priority": "x" * 100}, "priority", 'not "' + "x" * 36 + "..."),
    ],
)
def test_a_refused_value_is_quoted_as_json_and_cut_short(
    body: dict[str, Any], field: str, message: str
) -> None:
    assert errors_of(body)[field].endswith(message)


def test_every_problem_is_reported_at_once() -> None:
    body = {
        "priority": True,
        "max_retries": 0,
        "scheduled_at": "soon",
        "timeout": -1,
        "attempts": 2,
        "extra": 1,
        "payload": float("nan"),
    }

    with pytest.raises(ValidationError) as raised:
        validate_enqueue(body)

    fields = [e.field for e in raised.value.errors]
    assert sorted(fields) == sorted(
        [
            "attempts",
            "extra",
            "type",
            "payload",
            "priority",
            "max_retries",
            "scheduled_at",
            "timeout",
        ]
    )
    for name in fields:
        assert name in str(raised.value)


def test_canonical_is_equal_exactly_when_two_requests_mean_the_same() -> None:
    def canonical(**body: Any) -> str:
        return validate_enqueue({"type": "t", **body}).canonical()

    base = canonical(payload={"a": 1, "b": [1, 2]}, scheduled_at="2026-01-01T00:00:00Z")
    assert base == canonical(
        payload={"b": [1, 2], "a": 1},
        priority=0,
        max_retries=3,
        scheduled_at="2026-01-01T01:00:00+01:00",
    )
    assert canonical(timeout=5) == canonical(timeout=5.0)
    assert canonical() == canonical(payload={})
    different = [
        canonical(payload={"a": 2, "b": [1, 2]}, scheduled_at="2026-01-01T00:00:00Z"),
        canonical(payload={"a": 1, "b": [2, 1]}, scheduled_at="2026-01-01T00:00:00Z"),
        canonical(payload={"a": 1, "b": [1, 2]}, scheduled_at="2026-01-01T00:00:00.001Z"),
        canonical(payload={"a": 1, "b": [1, 2]}),
    ]
    assert base not in different
    assert len({canonical(), canonical(priority=1), canonical(max_retries=4)}) == 3
    assert canonical(timeout=5) != canonical()


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (T0, "2026-01-01T00:00:00.000Z"),
        (T0 + 7, "2026-01-01T00:00:00.007Z"),
        (T0 + 86_399_999, "2026-01-01T23:59:59.999Z"),
        (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
    ],
)
def test_format_ms_writes_rfc3339_utc_with_milliseconds(ms: int, text: str) -> None:
    assert format_ms(ms) == text
    assert validate_enqueue({"type": "t", "scheduled_at": text}).scheduled_at_ms == ms


def test_format_ms_of_none_is_none() -> None:
    assert format_ms(None) is None


def stored(**fields: str) -> dict[bytes, bytes]:
    """Return a job hash as HGETALL gives it (bytes), for a pending job plus `fields`."""
    base = {
        "id": "00000000-0000-4000-8000-000000000001",
        "type": "t",
        "status": "pending",
        "priority": "0",
        "max_retries": "3",
        "attempts": "0",
        "recoveries": "0",
        "token": "0",
        "payload": '{"a":1}',
        "created_at": str(T0),
        "updated_at": str(T0 + 1),
        "seq": "1",
    }
    return {k.encode(): v.encode() for k, v in (base | fields).items()}


def test_to_json_of_a_new_job_has_only_the_fields_that_apply() -> None:
    doc = Job.from_hash(stored()).to_json()

    assert doc == {
        "id": "00000000-0000-4000-8000-000000000001",
        "type": "t",
        "queue": "default",
        "status": "pending",
        "priority": 0,
        "max_retries": 3,
        "attempts": 0,
        "recoveries": 0,
        "payload": {"a": 1},
        "created_at": "2026-01-01T00:00:00.000Z",
        "updated_at": "2026-01-01T00:00:00.001Z",
        "traceback": None,  # always there: null until a handler's exception is recorded
    }
    assert json.loads(json.dumps(doc)) == doc


def test_to_json_of_a_finished_job_carries_its_timings_error_and_result() -> None:
    doc = Job.from_hash(
        stored(
            status="completed",
            attempts="2",
            scheduled_at=str(T0 + 1_000),
            started_at=str(T0 + 2_000),
            finished_at=str(T0 + 3_500),
            last_error="ValueError: x",
            result='{"ok":true}',
            timeout="2.5",
            worker_id="w1",
            token="2",
        )
    ).to_json()

    assert doc["status"] == "completed"
    assert doc["attempts"] == 2
    assert doc["scheduled_at"] == "2026-01-01T00:00:01.000Z"
    assert doc["started_at"] == "2026-01-01T00:00:02.000Z"
    assert doc["finished_at"] == "2026-01-01T00:00:03.500Z"
    assert doc["last_error"] == "ValueError: x"
    assert doc["result"] == {"ok": True}
    assert doc["timeout"] == 2.5
    # Internal fencing and routing details stay internal.
    assert not {"token", "worker_id", "seq"} & set(doc)


def test_to_json_shows_a_null_result_as_null() -> None:
    doc = Job.from_hash(stored(status="completed", result="null")).to_json()

    assert "result" in doc and doc["result"] is None


def test_to_json_of_a_retrying_job_says_when_it_runs_next() -> None:
    doc = Job.from_hash(stored(status="retrying", next_retry_at=str(T0 + 2_000))).to_json()

    assert doc["next_retry_at"] == "2026-01-01T00:00:02.000Z"


def test_format_ms_pads_years_before_1000_to_four_digits() -> None:
    assert format_ms(-62_000_000_000_000) == "0005-04-19T09:46:40.000Z"
    assert format_ms(0) == "1970-01-01T00:00:00.000Z"


def test_scheduled_at_before_1970_is_refused() -> None:
    with pytest.raises(ValidationError, match="scheduled_at"):
        validate_enqueue({"type": "t", "scheduled_at": "1969-12-31T23:59:59Z"})


def test_to_json_carries_the_stored_traceback() -> None:
    text = 'Traceback (most recent call last):\n  File "h.py", line 1, in h\nValueError: x\n'
    doc = Job.from_hash(stored(status="dead", last_error="ValueError: x", traceback=text)).to_json()

    assert (doc["last_error"], doc["traceback"]) == ("ValueError: x", text)


def _deep_traceback(frames: int, last_line: str) -> str:
    lines = ["Traceback (most recent call last):\n"]
    lines += [
        f'  File "/app/tasks.py", line {i}, in step_{i}\n    step_{i + 1}()\n'
        for i in range(frames)
    ]
    return "".join(lines) + last_line


def test_a_traceback_within_the_cap_is_kept_whole() -> None:
    text = _deep_traceback(3, "ValueError: é\n")

    assert cap_traceback(text) == text
    exactly = "x" * (TRACEBACK_LIMIT - 1) + "\n"
    assert cap_traceback(exactly) == exactly


def test_a_long_traceback_keeps_its_end_from_a_whole_frame_and_says_what_was_cut() -> None:
    text = _deep_traceback(2_000, "RecursionError: maximum recursion depth exceeded\n")

    capped = cap_traceback(text)

    assert len(capped.encode()) <= TRACEBACK_LIMIT
    note, first, *_ = capped.split("\n")
    kept = capped[len(note) + 1 :]
    assert text.endswith(kept)  # the end, unchanged: innermost frames and the exception
    assert kept.endswith(
        "in step_1999\n    step_2000()\nRecursionError: maximum recursion depth exceeded\n"
    )
    assert first.startswith('  File "/app/tasks.py"')  # a whole frame, not half of one
    cut = len(text.encode()) - len(kept.encode())
    assert note == f"[traceback cut to {TRACEBACK_LIMIT} bytes: its first {cut} bytes are left out]"
    assert len(capped.encode()) > TRACEBACK_LIMIT - 200  # cut only as much as needed


def test_a_capped_traceback_never_splits_a_character() -> None:
    capped = cap_traceback("é" * TRACEBACK_LIMIT, limit=101)  # no line to start from

    assert len(capped.encode()) <= 101
    assert capped.endswith("é") and "\ufffd" not in capped
    assert capped.startswith("[traceback cut to 101 bytes: its first ")


UNIT_SECONDS = {"ms": Decimal("0.001"), "s": Decimal(1), "": Decimal(1), "m": Decimal(60)}
UNIT_SECONDS |= {"h": Decimal(3600), "d": Decimal(86400)}


@settings(max_examples=400, deadline=None)
@given(
    whole=st.from_regex(r"[0-9]{1,11}", fullmatch=True),
    decimals=st.none() | st.from_regex(r"[0-9]{1,11}", fullmatch=True),
    unit=st.sampled_from(sorted(UNIT_SECONDS)),
)
def test_the_timeout_parser_accepts_exactly_the_durations_within_the_bounds(
    whole: str, decimals: str | None, unit: str
) -> None:
    # Parsed, then weighed: the document publishes only the shape (DURATION_PATTERN) and the
    # bounds in words, so the parser alone must take exactly the durations within them.
    text = whole + ("" if decimals is None else "." + decimals) + unit
    seconds = Decimal(text.removesuffix(unit)) * UNIT_SECONDS[unit]
    inside = 0 < seconds <= MAX_TIMEOUT_SECONDS and len(decimals or "") <= 9

    assert bool(re.fullmatch(DURATION_PATTERN, text)) == (len(decimals or "") <= 9), text
    if inside:
        # The same seconds as the same text in the environment: one parser.
        from_env = Settings.from_env({"TASK_DEFAULT_TIMEOUT": text}).default_job_timeout
        assert validate_enqueue({"type": "t", "timeout": text}).timeout == from_env
    else:
        assert "timeout" in errors_of({"type": "t", "timeout": text})


@pytest.mark.parametrize(
    "text",
    ["7d", "168h", "10080m", "604800", "604800s", "604800000ms", "7.000000000d", "0.000000001ms"],
)
def test_the_timeout_pattern_takes_its_edges(text: str) -> None:
    assert re.fullmatch(DURATION_PATTERN, text)
    assert 0 < (validate_enqueue({"type": "t", "timeout": text}).timeout or 0) <= 604800


# --- delay: relative to Redis's clock ---------------------------------------------------------


@pytest.mark.parametrize(
    ("delay", "ms"),
    [
        (0, 0),
        ("0", 0),
        ("0ms", 0),
        (30, 30_000),
        (2.5, 2_500),
        ("500ms", 500),
        ("90s", 90_000),
        ("5m", 300_000),
        ("1h", 3_600_000),
        ("1d", 86_400_000),
        ("0.3", 300),  # not 300.00000000000006 rounded up: whole milliseconds, the nearest
        ("366d", MAX_DELAY_SECONDS * 1000),
        (MAX_DELAY_SECONDS, MAX_DELAY_SECONDS * 1000),
    ],
)
def test_delay_takes_what_timeout_takes_and_zero_in_whole_milliseconds(delay: Any, ms: int) -> None:
    request = validate_enqueue({"type": "t", "delay": delay})

    assert (request.delay_ms, request.scheduled_at_ms) == (ms, None)
    assert request.scheduled_at_for(T0) == T0 + ms


def test_a_null_delay_is_no_delay() -> None:
    request = validate_enqueue({"type": "t", "delay": None})

    assert request == validate_enqueue({"type": "t"})
    assert request.scheduled_at_for(T0) is None


@pytest.mark.parametrize(
    "delay",
    [
        -1,
        -0.001,
        "-1s",
        MAX_DELAY_SECONDS + 1,
        "367d",
        "366.000000001d",
        "31622401",
        10**400,
        True,
        float("nan"),
        float("inf"),
        "5 m",
        "5M",
        "1w",
        ".5s",
        "",
        "soon",
        [5],
        {"m": 5},
    ],
    ids=repr,
)
def test_a_bad_delay_is_refused_naming_it(delay: Any) -> None:
    errors = errors_of({"type": "t", "delay": delay})

    assert list(errors) == ["delay"]
    assert "500ms, 2s, 1m, 1h or 1d" in errors["delay"] and "31622400" in errors["delay"]


@pytest.mark.parametrize("delay", [0, "5m", "bad"])
def test_delay_and_scheduled_at_together_are_refused_naming_both(delay: Any) -> None:
    errors = errors_of({"type": "t", "delay": delay, "scheduled_at": "2026-01-01T00:00:00Z"})

    assert errors == {
        "delay": "cannot be given with scheduled_at: give one of the two",
        "scheduled_at": "cannot be given with delay: give one of the two",
    }


def test_a_null_beside_the_other_is_not_giving_it() -> None:
    at = validate_enqueue({"type": "t", "delay": None, "scheduled_at": "2026-01-01T00:00:00Z"})
    later = validate_enqueue({"type": "t", "delay": "5m", "scheduled_at": None})

    assert (at.scheduled_at_ms, at.delay_ms) == (T0, None)
    assert (later.scheduled_at_ms, later.delay_ms) == (None, 300_000)


def test_the_idempotency_digest_covers_the_delay_and_not_its_spelling() -> None:
    def canonical(**body: Any) -> str:
        return validate_enqueue({"type": "t", **body}).canonical()

    assert canonical(delay="5m") == canonical(delay=300) == canonical(delay="300000ms")
    assert len({canonical(delay="5m"), canonical(delay="6m"), canonical(delay=0), canonical()}) == 4
    # A request without a delay keeps the digest it had before delays existed (keys reserved
    # then still match their repeats).
    assert "delay" not in canonical()


# 500, not the timeout test's 2,000: the same generator over the same parser, and the edges
# are pinned one by one below.
@settings(max_examples=500, deadline=None)
@given(
    whole=st.from_regex(r"[0-9]{1,12}", fullmatch=True),
    decimals=st.none() | st.from_regex(r"[0-9]{1,11}", fullmatch=True),
    unit=st.sampled_from(sorted(UNIT_SECONDS)),
)
def test_the_delay_parser_accepts_exactly_the_durations_within_the_bounds(
    whole: str, decimals: str | None, unit: str
) -> None:
    # As for timeout, with 0 allowed and a year's bound.
    text = whole + ("" if decimals is None else "." + decimals) + unit
    seconds = Decimal(text.removesuffix(unit)) * UNIT_SECONDS[unit]
    inside = 0 <= seconds <= MAX_DELAY_SECONDS and len(decimals or "") <= 9

    assert bool(re.fullmatch(DURATION_PATTERN, text)) == (len(decimals or "") <= 9), text
    if inside:
        delay_ms = validate_enqueue({"type": "t", "delay": text}).delay_ms
        # The nearest millisecond (a float's error, far below 1 µs here, may tip a half).
        assert delay_ms is not None and abs(delay_ms - seconds * 1000) <= Decimal("0.50001")
    else:
        assert "delay" in errors_of({"type": "t", "delay": text})


@pytest.mark.parametrize(
    "text",
    ["0", "0ms", "00.000000000d", "366d", "8784h", "527040m", "31622400", "31622400000ms"],
)
def test_the_delay_pattern_takes_its_edges(text: str) -> None:
    assert re.fullmatch(DURATION_PATTERN, text)
    assert 0 <= (validate_enqueue({"type": "t", "delay": text}).delay_ms or 0) <= 31_622_400_000


# --- the model and the field checks agree -------------------------------------------------------

FIELD_VALUES: dict[str, Any] = {
    "type": st.sampled_from(["t", "a\n", "", "x" * 129, 5, None, "send.email:v2"]),
    "queue": st.sampled_from(["default", "q-1", "bad name", "", "q" * 65, 3]),
    "payload": st.sampled_from([{}, {"a": [1]}, [], "x", None]),
    "priority": st.sampled_from([0, 8.0, 8.5, 2**31, 2**31 + 1, -(2**31), True, "5"]),
    "max_retries": st.sampled_from([1, 100, 0, 101, 3.0, "3"]),
    "scheduled_at": st.sampled_from([None, "2099-01-01T00:00:00Z", "2099-01-01", 5]),
    "delay": st.sampled_from([None, 0, "5m", "366d", "367d", "5m\n", -1, True, "1e3"]),
    "timeout": st.sampled_from([None, 1, "0s", "7d", "7.000000001d", 0, "2.5", False]),
    "id": st.just("x"),
}


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(sorted(FIELD_VALUES)), st.none(), max_size=6).flatmap(
        lambda keys: st.fixed_dictionaries({name: FIELD_VALUES[name] for name in keys})
    )
)
def test_the_model_accepts_exactly_what_the_field_checks_accept(body: dict[str, Any]) -> None:
    # validate_enqueue converts through EnqueueBody first and falls back to the field checks
    # (which name every problem): the two must agree on every body, and on its meaning.
    from shared.model.jobs import _checked, _converted

    try:
        checked: EnqueueRequest | None = _checked(body)
    except ValidationError:
        checked = None
    assert _converted(body) == checked
