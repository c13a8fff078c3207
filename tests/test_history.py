"""shared.engine.history: the stored form of a job's history, parsed for the API (no Redis)."""

from __future__ import annotations

import pytest

from shared.engine.history import History, host_of, parse
from shared.model.jobs import format_ms

CREATED = 1_767_225_600_000
WORKER = "3f2a9c1b7d8e-4242-worker1-7"  # a container's host name, as workerd names a worker


def test_a_finished_job_reads_as_three_entries_oldest_first() -> None:
    found = parse(f"qa0|0\ncw12|1|{WORKER}\ndw340".encode(), CREATED)

    assert found.dropped == 0
    assert found.to_json() == [
        {"event": "enqueued", "at": format_ms(CREATED), "attempt": 0, "actor": "api"},
        {
            "event": "claimed",
            "at": format_ms(CREATED + 12),
            "attempt": 1,
            "worker": WORKER,
            "host": "3f2a9c1b7d8e",
            "actor": "worker",
        },
        {
            "event": "completed",
            "at": format_ms(CREATED + 340),
            "attempt": 1,
            "worker": WORKER,
            "host": "3f2a9c1b7d8e",
            "actor": "worker",
        },
    ]


def test_an_execution_ends_with_the_attempt_and_worker_of_the_claim_before_it() -> None:
    found = parse("qa0|0\ncw1|1|a-1-worker0-1\nrv9|||Timeout\nps20|1\ncw21|2|b-2-worker1-1", 0)

    assert [(e.event, e.attempt, e.worker, e.error, e.actor) for e in found.entries] == [
        ("enqueued", 0, None, None, "api"),
        ("claimed", 1, "a-1-worker0-1", None, "worker"),
        ("retrying", 1, "a-1-worker0-1", "Timeout", "supervisor"),
        ("promoted", 1, None, None, "scheduler"),
        ("claimed", 2, "b-2-worker1-1", None, "worker"),
    ]


def test_the_dropped_count_is_the_first_line() -> None:
    found = parse("+7\ncw5|3|w\nxs9|||WorkerLost", 0)

    assert found.dropped == 7
    assert [e.event for e in found.entries] == ["claimed", "dead"]
    assert found.entries[1].attempt == 3 and found.entries[1].error == "WorkerLost"


def test_an_end_without_its_claim_names_no_worker_rather_than_a_wrong_one() -> None:
    [entry] = parse("dw5", 0).entries

    assert entry.to_json() == {"event": "completed", "at": format_ms(5), "actor": "worker"}


@pytest.mark.parametrize("value", [None, b"", ""])
def test_a_job_without_history_has_an_empty_one(value: bytes | str | None) -> None:
    assert parse(value, CREATED) == History([], 0)


def test_a_line_no_script_wrote_is_left_out() -> None:
    found = parse("qa0|0\nnonsense\nzz1\ncw-3|1|w1", CREATED)

    assert [e.event for e in found.entries] == ["enqueued", "claimed"]
    assert found.entries[1].at_ms == CREATED - 3  # a clock that stepped back is shown as is


@pytest.mark.parametrize(
    ("worker_id", "host"),
    [
        ("web-7-4242-worker0-3", "web-7"),
        ("ip-10-0-1-23.ec2.internal-99-worker12-140", "ip-10-0-1-23.ec2.internal"),
        ("w1", None),  # not workerd's shape: no host claimed
        ("host-x-worker0-1", None),
        (None, None),
    ],
)
def test_the_host_comes_from_the_worker_id(worker_id: str | None, host: str | None) -> None:
    assert host_of(worker_id) == host
