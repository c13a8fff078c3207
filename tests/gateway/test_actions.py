"""The operator actions (gateway.actions) on a real redis-server, without a request: what each
changes, returns and records, and the refusal each raises (mapped once to HTTP statuses)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from gateway.actions import fleet_actions as fleet
from gateway.actions import job_actions
from gateway.actions import queue_actions as queues
from gateway.actions.action_errors import (
    ActionError,
    Conflict,
    InvalidInput,
    NotFound,
    QueueInUse,
    WrongJobState,
)
from gateway.context import Gateway
from gateway.http_errors import action_status
from shared.engine import history
from shared.engine.lifecycle import Outcome, Transition
from shared.engine.limits import read_limits
from shared.engine.queries import get_job
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState
from shared.model.limit_rules import Limit, QueueLimits, parse_limits
from shared.model.schedules import parse_entry
from shared.read.hosts import read_hosts
from shared.read.queue_removal import QueueKept
from shared.settings.config import Settings
from tests.gateway.test_ui import K, put, put_dead
from workerd.periodic import Periodic

UNKNOWN = "00000000-0000-4000-8000-000000000000"
BY = "api 10.0.0.7"


@pytest.fixture
def gate(engine: Scripts) -> Gateway:
    """Return the gateway handle the actions take, on the test's real redis-server."""
    return Gateway(Settings.from_env({}), engine)


def outcomes(seen: list[Transition]) -> list[tuple[Outcome, str]]:
    return [(t.outcome, t.job_id) for t in seen]


def status_of(gate: Gateway, job_id: str, queue: str = "default") -> str | None:
    raw = gate.redis.hget(K.for_queue(queue).job(job_id), "status")
    return None if raw is None else raw.decode()


# --- one job -----------------------------------------------------------------------------------


def test_replay_returns_the_job_pending_again_and_records_it(
    gate: Gateway, transitions: list[Transition]
) -> None:
    job_id = put_dead(gate.scripts, "mail")

    job = job_actions.replay(gate, job_id)  # its queue found by id

    assert (job.id, job.status, job.attempts, job.queue) == (job_id, JobState.PENDING, 0, "mail")
    assert status_of(gate, job_id, "mail") == "pending"
    assert (Outcome.REPLAYED, job_id) in outcomes(transitions)


def test_replay_of_a_job_not_dead_is_refused_with_its_state(gate: Gateway) -> None:
    job_id = put(gate.scripts)

    with pytest.raises(WrongJobState) as refused:
        job_actions.replay(gate, job_id, queue="default")

    assert refused.value.status == "pending"
    assert refused.value.message == "job is pending, not dead: only dead jobs are in the DLQ"
    assert refused.value.facts == {"status": "pending"}
    assert status_of(gate, job_id) == "pending"


@pytest.mark.parametrize("act", [job_actions.replay, job_actions.purge])
def test_an_unknown_job_is_not_found(gate: Gateway, act: Any) -> None:
    with pytest.raises(NotFound, match=r"^job not found$"):
        act(gate, UNKNOWN)


def test_purge_deletes_a_dead_job_once(gate: Gateway, transitions: list[Transition]) -> None:
    job_id = put_dead(gate.scripts, "mail")

    purged = job_actions.purge(gate, job_id)

    assert purged == job_actions.Purged(job_id, "mail", "seed")
    assert not gate.redis.exists(K.for_queue("mail").job(job_id))
    assert outcomes(transitions)[-1] == (Outcome.PURGED, job_id)
    with pytest.raises(NotFound):
        job_actions.purge(gate, job_id)


def test_purge_of_a_pending_job_keeps_it(gate: Gateway) -> None:
    job_id = put(gate.scripts)

    with pytest.raises(WrongJobState):
        job_actions.purge(gate, job_id)

    assert status_of(gate, job_id) == "pending"


def test_cancel_of_a_pending_job_is_recorded_once_however_often_asked(
    gate: Gateway, transitions: list[Transition]
) -> None:
    job_id = put(gate.scripts, "mail")

    first = job_actions.cancel(gate, job_id, by=BY)
    again = job_actions.cancel(gate, job_id, by="dashboard 10.0.0.8", queue="mail")

    assert (first.changed, first.job.status) == (True, JobState.CANCELED)
    assert (again.changed, again.job.status) == (False, JobState.CANCELED)
    assert outcomes(transitions) == [(Outcome.CANCELED, job_id)]


def test_cancel_of_a_running_job_keeps_who_asked_in_its_history(
    gate: Gateway, transitions: list[Transition]
) -> None:
    job_id = put(gate.scripts, "mail")
    claimed = gate.scripts.claim("w-test", queue="mail")
    assert claimed is not None and claimed.id == job_id

    asked = job_actions.cancel(gate, job_id, by=BY)

    assert (asked.changed, asked.job.status) == (True, JobState.PROCESSING)
    assert transitions[-1].outcome is Outcome.CANCEL_REQUESTED
    assert transitions[-1].fields == {"by": BY}
    kept = history.read(gate.redis, gate.keys, job_id, "mail")
    assert kept is not None and kept.entries[-1].by == BY


def test_cancel_of_a_finished_job_says_which_states_can(gate: Gateway) -> None:
    job_id = put_dead(gate.scripts)

    with pytest.raises(WrongJobState) as refused:
        job_actions.cancel(gate, job_id, by=BY)

    assert refused.value.message == (
        "job is dead: only pending, scheduled, retrying or processing jobs can be canceled"
    )


# --- many dead jobs ----------------------------------------------------------------------------


def test_bulk_by_ids_looks_in_every_listed_queue(gate: Gateway) -> None:
    mail, pdf = put_dead(gate.scripts, "mail"), put_dead(gate.scripts, "pdf")
    alive = put(gate.scripts, "mail")

    which = job_actions.DeadJobs(ids=[mail, pdf, alive, UNKNOWN])
    result = job_actions.bulk_dlq(gate, "replay", which, limit=4)

    assert sorted(result.done) == sorted([mail, pdf])
    assert sorted(result.skipped) == sorted([(alive, "not dead: pending"), (UNKNOWN, "not found")])
    assert result.next_cursor is None
    assert {status_of(gate, mail, "mail"), status_of(gate, pdf, "pdf")} == {"pending"}


def test_bulk_by_filter_takes_one_page_or_walks_up_to_a_bound(gate: Gateway) -> None:
    ids = [put_dead(gate.scripts, "mail") for _ in range(5)]
    which = job_actions.DeadJobs(queue="mail")

    one_page = job_actions.bulk_dlq(gate, "purge", which, limit=2)
    walked = job_actions.bulk_dlq(
        gate, "purge", which, limit=2, cursor=one_page.next_cursor, up_to=2
    )
    rest = job_actions.bulk_dlq(gate, "purge", which, limit=2, cursor=walked.next_cursor, up_to=9)

    assert (len(one_page.done), len(walked.done), len(rest.done)) == (2, 2, 1)
    assert one_page.next_cursor is not None and walked.next_cursor is not None
    assert rest.next_cursor is None
    assert sorted(one_page.done + walked.done + rest.done) == sorted(ids)


def test_bulk_filter_walks_several_pages_until_its_bound(gate: Gateway) -> None:
    for _ in range(5):
        put_dead(gate.scripts, "mail")

    result = job_actions.bulk_dlq(
        gate, "replay", job_actions.DeadJobs(queue="mail"), limit=2, up_to=3
    )

    assert len(result.done) == 4  # two pages of two: the bound of three reached after the second
    assert result.next_cursor is not None


def test_bulk_with_a_cursor_no_listing_made_is_invalid(gate: Gateway) -> None:
    with pytest.raises(InvalidInput, match=r"^bad cursor: "):
        job_actions.bulk_dlq(
            gate, "replay", job_actions.DeadJobs(queue="mail"), limit=2, cursor="x"
        )


# --- queues ------------------------------------------------------------------------------------


def test_pause_lists_a_new_queue_and_a_repeat_changes_nothing(
    gate: Gateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.actions.queue_actions")

    assert queues.pause_queue(gate, "fresh", by=BY) is True
    assert queues.pause_queue(gate, "fresh", by=BY) is False

    assert "fresh" in gate.directory.names(refresh=True)
    assert gate.redis.exists(K.for_queue("fresh").paused)
    logged = [(r.msg, r.queue, r.changed, r.by) for r in caplog.records]  # type: ignore[attr-defined]
    assert logged == [("queue_paused", "fresh", True, BY), ("queue_paused", "fresh", False, BY)]


def test_resume_says_whether_the_queue_was_paused(gate: Gateway) -> None:
    queues.pause_queue(gate, "mail", by=BY)

    assert queues.resume_queue(gate, "mail", by=BY) is True
    assert queues.resume_queue(gate, "mail", by=BY) is False
    assert not gate.redis.exists(K.for_queue("mail").paused)


def test_delete_refuses_a_queue_in_use_with_what_keeps_it(gate: Gateway) -> None:
    put(gate.scripts, "mail")

    with pytest.raises(QueueInUse) as refused:
        queues.delete_queue(gate, "mail")

    assert refused.value.kept.jobs["pending"] == 1
    assert refused.value.message == "queue kept: the queue is not empty: 1 pending"
    assert refused.value.facts["served_by"] == [] and refused.value.facts["paused"] is False
    assert "mail" in gate.directory.names(refresh=True)


def test_delete_takes_an_empty_queue_off_the_list_and_a_second_is_not_found(
    gate: Gateway,
) -> None:
    queues.pause_queue(gate, "spare", by=BY)
    queues.resume_queue(gate, "spare", by=BY)

    queues.delete_queue(gate, "spare")

    assert "spare" not in gate.directory.names(refresh=True)
    with pytest.raises(NotFound, match=r"^queue not found$"):
        queues.delete_queue(gate, "spare")


def test_limits_set_keep_or_replace_the_types_and_clear(gate: Gateway) -> None:
    queues.set_type_limit(gate, "mail", "pdf", Limit(concurrency=2), by=BY)

    kept = queues.set_queue_limits(
        gate, "mail", parse_limits({"concurrency": 5}), replace_types=False, by=BY
    )
    assert kept.compact_json() == read_limits(gate.redis, gate.keys, "mail").compact_json()
    assert read_limits(gate.redis, gate.keys, "mail") == parse_limits(
        {"concurrency": 5, "types": {"pdf": {"concurrency": 2}}}
    )
    assert "mail" in gate.directory.names(refresh=True)  # a limit lists the queue

    queues.set_queue_limits(gate, "mail", parse_limits({"rate": "3/s"}), replace_types=True, by=BY)
    assert read_limits(gate.redis, gate.keys, "mail") == parse_limits({"rate": "3/s"})

    queues.set_type_limit(gate, "mail", "pdf", Limit(concurrency=1), by=BY)
    queues.clear_type_limit(gate, "mail", "pdf", by=BY)
    assert read_limits(gate.redis, gate.keys, "mail") == parse_limits({"rate": "3/s"})

    assert queues.clear_queue_limits(gate, "mail", by=BY) == QueueLimits()
    assert read_limits(gate.redis, gate.keys, "mail") == QueueLimits()


def test_limits_that_keep_changing_under_the_action_are_a_conflict(
    gate: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = gate.scripts.set_limits

    def raced(queue: str, stored: str, *, expected: str) -> Any:
        # Another operator's change lands between each read and its compare-and-set.
        gate.redis.set(K.for_queue(queue).limits, f'{{"c": {gate.redis.incr("n")}}}')
        return real(queue, stored, expected=expected)

    monkeypatch.setattr(gate.scripts, "set_limits", raced)

    with pytest.raises(Conflict, match=r"kept changing; try again$"):
        queues.clear_queue_limits(gate, "mail", by=BY)


# --- hosts and schedules -----------------------------------------------------------------------


def test_quiet_and_resume_a_host_leave_the_request_in_its_record(gate: Gateway) -> None:
    record = {"host": "box", "pid": 7, "workers": 3, "busy": 1, "queues": "default"}
    gate.scripts.heartbeat("box-7", record, ttl_ms=10_000)

    assert fleet.quiet_host(gate, "box-7", True, by=BY) is False  # it still claims, for now
    (host,) = read_hosts(gate.redis, gate.keys, ["box-7"])
    assert host is not None and host.quiet_requested is True

    fleet.quiet_host(gate, "box-7", False, by=BY)
    (host,) = read_hosts(gate.redis, gate.keys, ["box-7"])
    assert host is not None and host.quiet_requested is False


def test_quiet_of_an_unknown_host_is_not_found(gate: Gateway) -> None:
    with pytest.raises(NotFound, match=r"^workerd host not found$"):
        fleet.quiet_host(gate, "gone-9", True, by=BY)


def test_pause_and_resume_a_published_schedule(gate: Gateway) -> None:
    nightly = parse_entry("nightly", {"cron": "0 3 * * *", "job": {"type": "pdf"}})
    Periodic(gate.scripts, [nightly]).publish()

    assert fleet.pause_schedule(gate, "nightly", by=BY) is True
    assert fleet.pause_schedule(gate, "nightly", by=BY) is False
    assert fleet.resume_schedule(gate, "nightly", by=BY) is True
    assert fleet.resume_schedule(gate, "nightly", by=BY) is False


@pytest.mark.parametrize("act", [fleet.pause_schedule, fleet.resume_schedule])
def test_an_unpublished_schedule_is_not_found(gate: Gateway, act: Any) -> None:
    with pytest.raises(NotFound, match=r"^schedule not found$"):
        act(gate, "other", by=BY)


# --- the API's mapping -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (NotFound("job not found"), 404),
        (WrongJobState("job is dead", "dead"), 409),
        (QueueInUse(QueueKept(paused=True)), 409),
        (Conflict("kept changing"), 409),
        (InvalidInput("bad cursor"), 400),
    ],
)
def test_each_refusal_has_one_status(error: ActionError, status: int) -> None:
    assert action_status(error) == status


def test_the_job_read_after_a_replay_matches_what_it_returned(gate: Gateway) -> None:
    job_id = put_dead(gate.scripts, "mail")

    returned = job_actions.replay(gate, job_id)

    stored = get_job(gate.redis, gate.keys, job_id, ["mail"])
    assert stored is not None and stored.to_json() == returned.to_json()
