"""A claim reply read by position gives the Job the generic reading of its fields gives."""

from __future__ import annotations

import dataclasses
import json

import pytest

from shared.engine.replies import CLAIM_REPLY_FIELDS, claimed_job, job_from_fields
from shared.model.jobs import DEFAULT_MAX_RETRIES, Job, JobState, dump_json


def by_names(values: list[bytes | None], worker_id: str, queue: str) -> Job:
    """The reading claimed_job replaced: a dict of the fields present, through Job.from_hash."""
    pairs = zip(CLAIM_REPLY_FIELDS, values, strict=True)
    raw = {name: value for name, value in pairs if value is not None}
    raw[b"status"] = b"processing"
    raw[b"updated_at"] = raw[b"started_at"]
    raw[b"worker_id"] = worker_id.encode()
    return job_from_fields(raw, queue)


FULL = [
    b"0b6a6b0e-5b3a-4b7e-9d57-4e4f3c2a1b0c",
    b"send_email",
    b"-5",
    b"7",
    b"2",
    b"1",
    '{"to":"ada@example.com","name":"Zoë"}'.encode(),
    b"1765000000000",
    b"42",
    b"1765000000500",
    b"2.5",
    b"1765000000600",
    b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    b"1765000000700",
    b"1",
]
OPTIONAL = (9, 10, 11, 12, 14)  # scheduled_at, timeout, eligible_at, traceparent, alone


def replies() -> list[list[bytes | None]]:
    bare = [None if i in OPTIONAL else value for i, value in enumerate(FULL)]
    zeros = list(bare)
    zeros[2], zeros[3], zeros[4], zeros[5], zeros[8] = b"0", b"0", b"0", b"0", b"0"
    each = []
    for i in OPTIONAL:  # one optional field at a time
        one = list(bare)
        one[i] = FULL[i]
        each.append(one)
    return [FULL, bare, zeros, *each]


@pytest.mark.parametrize("values", replies())
def test_claimed_job_is_the_job_its_fields_name(values: list[bytes | None]) -> None:
    job = claimed_job(values, "host:1:w0", "emails")
    expected = by_names(values, "host:1:w0", "emails")
    assert job == expected
    assert job.extra == expected.extra  # not part of Job's equality
    assert job.status is JobState.PROCESSING
    assert job.updated_at == job.started_at == 1765000000700


def test_a_claimed_job_without_max_retries_gets_the_default() -> None:
    values = list(FULL)
    values[3] = b"0"  # as Job.from_hash reads it: 0 is no maximum given
    assert claimed_job(values, "w", "q").max_retries == DEFAULT_MAX_RETRIES


def test_a_reply_of_another_length_is_refused() -> None:
    with pytest.raises(ValueError):
        claimed_job(FULL[:-1], "w", "q")


@pytest.mark.parametrize(
    "value", [None, {"to": "ada@example.com", "n": 1}, ["Zoë", 1.5, True], "x" * 3]
)
def test_dump_json_is_compact_unescaped_json(value: object) -> None:
    expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    assert dump_json(value) == expected


def test_dump_json_refuses_what_json_cannot_hold() -> None:
    with pytest.raises(ValueError):
        dump_json(float("nan"))


def test_a_claimed_job_has_every_field_of_job_in_order_and_job_no_post_init() -> None:
    # claimed_job sets Job's fields without its __init__: a field added to Job, or a
    # __post_init__, must be added there too.
    job = claimed_job(FULL, "w", "q")
    assert list(vars(job)) == [f.name for f in dataclasses.fields(Job)]
    assert not hasattr(Job, "__post_init__")
    assert job == Job(**{f.name: getattr(job, f.name) for f in dataclasses.fields(Job)})


@pytest.mark.parametrize("index", [2, 3, 4, 5, 7, 8, 13])  # the numbers a reply always has
def test_an_empty_number_is_refused_as_the_generic_reading_refuses_it(index: int) -> None:
    values = list(FULL)
    values[index] = b""
    with pytest.raises(ValueError):
        by_names(values, "w", "q")
    with pytest.raises(ValueError):
        claimed_job(values, "w", "q")
