"""Deleting a queue (delete_queue.lua, shared.read.queue_removal) and finding a job by its id's tag
(shared.model.job_ids, shared.read.directory), on a real Redis.

A delete racing an enqueue is driven step by step: the enqueue is made to land between the
delete's calls (after the unlisting, or after the deleting script), never by timing.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis

from shared.engine.engine_types import Code
from shared.engine.scripts import Scripts
from shared.model.job_ids import new_job_id, queue_tag, tag_of
from shared.model.jobs import JobState
from shared.read.directory import QueueDirectory
from shared.read.queue_removal import QueueKept, QueueNotListed, delete_queue
from tests.engine.conftest import T0, K, request
from tests.support.own_redis_server import own_redis_server  # noqa: F401  # counts: no stray reader
from tests.support.tools import commands_caused

Q = "mail"
EMPTY_JOBS = dict.fromkeys(("pending", "held", "scheduled", "retrying", "processing", "dead"), 0)


def glob_escaped(text: str) -> str:
    """Return `text` with Redis's glob characters escaped, to match it literally in SCAN."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)


def put(scripts: Scripts, queue: str = Q, **fields: Any) -> str:
    """Enqueue as a producer does (shared.read.directory): list, enqueue, list again if first."""
    directory = QueueDirectory(scripts)
    directory.ensure(queue)
    job_id = new_job_id(queue)
    result = scripts.enqueue(request(queue=queue, **fields), job_id)
    assert result.created
    directory.enqueued([(queue, result)])
    return job_id


def queue_keys(r: redis.Redis, queue: str) -> list[bytes]:
    """Return every key in one queue's slot (its hash tag) that does not expire by itself (a
    claim's repeat pointer, a purge's tombstone and a batch's reply live seconds)."""
    found = r.scan_iter(match=f"{glob_escaped(K.for_queue(queue).prefix)}*")
    return sorted(key for key in found if r.pttl(key) == -1)


def listed(r: redis.Redis, queue: str) -> tuple[bool, bool]:
    """Return whether `queue` is on the list of queues, and in the tag map."""
    in_tags = r.sismember(K.queue_tag(queue_tag(queue)), queue)
    return bool(r.sismember(K.queues, queue)), bool(in_tags)


def run_to(scripts: Scripts, queue: str, end: str) -> str:
    """Enqueue one job into `queue` and run it to `end`: completed, canceled or dead."""
    job_id = put(scripts, queue, max_retries=1)
    if end == "canceled":
        scripts.cancel(job_id, queue=queue)
        return job_id
    job = scripts.claim("w1", queue=queue)
    assert job is not None and job.id == job_id
    if end == "completed":
        assert scripts.complete(job_id, job.token, queue=queue).code is Code.DONE
    else:
        assert scripts.fail(job_id, job.token, "boom", queue=queue).code is Code.DEAD
    return job_id


# --- the script ------------------------------------------------------------------------------


def test_an_empty_queue_is_deleted_with_its_history_and_events_and_nothing_else(
    r: redis.Redis, scripts: Scripts
) -> None:
    finished = [run_to(scripts, Q, "completed"), run_to(scripts, Q, "canceled")]
    other = put(scripts, "other")
    scripts.trim(now_ms=T0)  # writes the throughput hash too
    assert queue_keys(r, Q)
    others_before = queue_keys(r, "other")

    assert delete_queue(QueueDirectory(scripts), Q) is None

    assert queue_keys(r, Q) == []
    assert listed(r, Q) == (False, False)
    assert queue_keys(r, "other") == others_before
    finder = QueueDirectory(scripts)
    assert [finder.locator.find_job(job_id) for job_id in finished] == [None, None]
    assert finder.locator.find_job(other) is not None


@pytest.mark.parametrize(
    ("setup", "kept"),
    [
        ("pending", {"pending": 1}),
        ("scheduled", {"scheduled": 1}),
        ("processing", {"processing": 1}),
        ("retrying", {"retrying": 1}),
        ("dead", {"dead": 1}),
        ("held", {"held": 1, "processing": 1}),
    ],
)
def test_a_queue_holding_a_job_is_kept_and_the_answer_counts_it(
    r: redis.Redis, scripts: Scripts, setup: str, kept: dict[str, int]
) -> None:
    if setup == "pending":
        put(scripts)
    elif setup == "scheduled":
        put(scripts, delay="1h")
    elif setup == "held":
        scripts.set_limits(Q, '{"t": {"t": {"c": 1}}}')  # a type's limit holds jobs back
        put(scripts), put(scripts)
        assert scripts.claim("w1", queue=Q) is not None
        assert scripts.claim("w2", queue=Q) is None  # over the limit: held
    else:
        job_id = put(scripts, max_retries=1 if setup == "dead" else 2)
        job = scripts.claim("w1", queue=Q)
        assert job is not None
        if setup != "processing":
            scripts.fail(job_id, job.token, "boom", queue=Q)
    before = sorted((key, r.dump(key)) for key in queue_keys(r, Q))

    reason = delete_queue(QueueDirectory(scripts), Q)

    assert reason == QueueKept(jobs={**EMPTY_JOBS, **kept}, limited=setup == "held")
    assert "not empty" in reason.reason()
    assert sorted((key, r.dump(key)) for key in queue_keys(r, Q)) == before
    assert listed(r, Q) == (True, True)


def test_a_paused_or_limited_queue_is_kept_while_it_is(r: redis.Redis, scripts: Scripts) -> None:
    directory = QueueDirectory(scripts)
    directory.relist(Q)
    scripts.pause_queue(Q)
    paused = delete_queue(directory, Q)
    assert paused == QueueKept(jobs=EMPTY_JOBS, paused=True)
    assert paused.reason() == "the queue is paused: resume it first"  # each state its own fix
    scripts.set_limits(Q, '{"c": 1}')
    kept = delete_queue(directory, Q)
    assert kept is not None
    assert kept.reason() == "the queue is paused and limited: resume it and clear its limits first"
    scripts.resume_queue(Q)
    limited = delete_queue(directory, Q)
    assert (
        limited is not None and limited.reason() == "the queue is limited: clear its limits first"
    )
    scripts.set_limits(Q, "")
    assert delete_queue(directory, Q) is None


def test_a_name_not_listed_and_the_default_queue_are_not_deleted(scripts: Scripts) -> None:
    with pytest.raises(QueueNotListed):
        delete_queue(QueueDirectory(scripts), "never-used")
    put(scripts, "default")
    kept = delete_queue(QueueDirectory(scripts), "default")
    assert kept is not None and kept.default and "default" in kept.reason()


def test_a_queue_a_live_workerd_host_serves_is_kept(scripts: Scripts) -> None:
    directory = QueueDirectory(scripts)
    directory.relist(Q)
    scripts.heartbeat("h-1", {"host": "h", "plan": f"critical,{Q}"}, 10_000)
    kept = delete_queue(directory, Q)
    assert kept is not None and kept.served_by == ("h-1",)
    assert "h-1" in kept.reason()
    scripts.heartbeat("h-1", {"host": "h"}, 10_000, leaving=True)
    assert delete_queue(directory, Q) is None


def test_the_check_alone_changes_nothing(r: redis.Redis, scripts: Scripts) -> None:
    run_to(scripts, Q, "completed")
    before = queue_keys(r, Q)
    assert scripts.delete_queue(Q, delete=False) is None
    assert queue_keys(r, Q) == before


# --- an enqueue says when it is its queue's first --------------------------------------------


@pytest.mark.parametrize("fields", [{}, {"delay": "1h"}], ids=["pending", "scheduled"])
def test_an_enqueue_says_it_is_its_queues_first_again_after_a_delete(
    scripts: Scripts, fields: dict[str, Any]
) -> None:
    def first() -> bool:
        return scripts.enqueue(request(queue=Q, **fields), new_job_id(Q)).first_in_queue

    assert (first(), first()) == (True, False)
    for state in (JobState.PENDING, JobState.SCHEDULED):
        scripts.redis.delete(scripts.q(Q).state_index(str(state)))  # emptied by hand
    scripts.redis.sadd(K.queues, Q)
    assert scripts.delete_queue(Q) is None
    assert (first(), first()) == (True, False)


# --- a delete racing an enqueue --------------------------------------------------------------


def land_after(
    monkeypatch: pytest.MonkeyPatch, scripts: Scripts, step: str, action: Callable[[], Any]
) -> None:
    """Run `action` once, right after the delete's `step` (a Scripts method) returns."""
    original = getattr(scripts, step)
    done: list[bool] = []

    def then(*args: Any, **kwargs: Any) -> Any:
        reply = original(*args, **kwargs)
        if kwargs.get("delete", True) and not done:
            done.append(True)
            action()
        return reply

    monkeypatch.setattr(scripts, step, then)


def test_an_enqueue_landing_after_the_unlisting_keeps_the_queue_listed(
    r: redis.Redis, scripts: Scripts, make_scripts: Callable[..., Scripts], monkeypatch
) -> None:
    producer = QueueDirectory(make_scripts())  # another process, which listed the queue before
    producer.ensure(Q)
    landed: list[str] = []

    def enqueue() -> None:
        job_id = new_job_id(Q)
        result = producer.scripts.enqueue(request(queue=Q), job_id)
        producer.enqueued([(Q, result)])
        landed.append(job_id)

    land_after(monkeypatch, scripts, "unregister_queue", enqueue)
    kept = delete_queue(QueueDirectory(scripts), Q)

    assert kept == QueueKept(jobs={**EMPTY_JOBS, "pending": 1})
    assert listed(r, Q) == (True, True)
    assert QueueDirectory(scripts).locator.find_job(landed[0]) is not None


def test_an_enqueue_landing_after_the_delete_lists_the_queue_again(
    r: redis.Redis, scripts: Scripts, make_scripts: Callable[..., Scripts], monkeypatch
) -> None:
    run_to(scripts, Q, "completed")  # a FIFO counter to delete
    producer = QueueDirectory(make_scripts())  # remembers the queue as listed
    producer.ensure(Q)
    landed: list[str] = []

    def enqueue() -> None:
        job_id = new_job_id(Q)
        producer.ensure(Q)  # remembered: no call
        result = producer.scripts.enqueue(request(queue=Q), job_id)
        producer.enqueued([(Q, result)])
        landed.append(job_id)

    land_after(monkeypatch, scripts, "delete_queue", enqueue)
    assert delete_queue(QueueDirectory(scripts), Q) is None

    assert listed(r, Q) == (True, True)
    assert QueueDirectory(scripts).locator.find_job(landed[0]) is not None
    assert Q in QueueDirectory(scripts).names()


def test_a_pause_landing_after_the_unlisting_keeps_the_queue_listed_and_paused(
    r: redis.Redis, scripts: Scripts, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = QueueDirectory(scripts)
    directory.relist(Q)

    def pause() -> None:  # as POST /queues/<name>/pause does: the flag, then the list
        scripts.pause_queue(Q)
        QueueDirectory(scripts).relist(Q)

    land_after(monkeypatch, scripts, "unregister_queue", pause)
    assert delete_queue(directory, Q) == QueueKept(jobs=EMPTY_JOBS, paused=True)
    assert listed(r, Q) == (True, True)


# --- finding a job by id ---------------------------------------------------------------------


def test_a_lookup_by_id_reads_one_tag_and_one_job_whatever_the_number_of_queues(
    r: redis.Redis, scripts: Scripts
) -> None:
    directory = QueueDirectory(scripts)
    for n in range(200):
        directory.relist(f"q{n}")
    job_id = put(scripts, "q150")
    finder = QueueDirectory(scripts)

    first = commands_caused(r, lambda: finder.locator.find_job(job_id))
    again = commands_caused(r, lambda: finder.locator.find_job(job_id))
    located = commands_caused(r, lambda: finder.locator.locate(job_id))

    assert first == Counter({"smembers": 1, "hgetall": 1})
    assert again == Counter({"hgetall": 1})  # the tag's queues remembered
    assert located == Counter({"exists": 1})


def test_an_id_no_queue_has_is_not_found_after_one_read(r: redis.Redis, scripts: Scripts) -> None:
    for n in range(50):
        QueueDirectory(scripts).relist(f"q{n}")
    finder = QueueDirectory(scripts)
    stranger = "0badc0de-1234-4567-89ab-0123456789ab"
    assert commands_caused(r, lambda: finder.locator.find_job(stranger)) == Counter({"smembers": 1})
    assert finder.locator.find_job(stranger) is None and finder.locator.locate(stranger) is None


def colliding_names() -> tuple[str, str]:
    """Return two queue names whose tags are equal (a birthday search over 32 bits)."""
    seen: dict[str, str] = {}
    for n in itertools.count():
        name = f"c{n}"
        tag = queue_tag(name)
        if tag in seen:
            return seen[tag], name
        seen[tag] = name
    raise AssertionError("unreachable")


def test_queues_whose_tags_collide_are_both_searched(r: redis.Redis, scripts: Scripts) -> None:
    a, b = colliding_names()
    first, second = put(scripts, a), put(scripts, b)
    assert tag_of(first) == tag_of(second)
    finder = QueueDirectory(scripts)
    found = [finder.locator.find_job(first), finder.locator.find_job(second)]
    assert [(j.id, j.queue) for j in found if j] == [(first, a), (second, b)]
    assert (finder.locator.locate(first), finder.locator.locate(second)) == (a, b)
    assert delete_queue(finder, a) == QueueKept(jobs={**EMPTY_JOBS, "pending": 1})


def test_a_lookup_remembering_a_deleted_queue_finds_it_again_when_it_comes_back(
    scripts: Scripts,
) -> None:
    old = run_to(scripts, Q, "completed")
    finder = QueueDirectory(scripts)
    assert finder.locator.find_job(old) is not None
    assert delete_queue(QueueDirectory(scripts), Q) is None
    assert finder.locator.find_job(old) is None
    new = put(scripts)
    assert finder.locator.find_job(new) is not None


def test_while_the_tag_map_cannot_be_read_on_a_cluster_the_known_queues_with_the_tag_answer(
    scripts: Scripts, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = put(scripts)
    other = put(scripts, "other")
    finder = QueueDirectory(scripts)
    finder.ensure(Q)  # a queue this process knows (it enqueued there)

    def down(*args: Any) -> Any:
        raise redis.exceptions.ConnectionError("the global slot's master is failing over")

    monkeypatch.setattr(scripts.redis, "smembers", down)
    monkeypatch.setattr("shared.engine.job_locator.is_cluster", lambda client: True)

    found = finder.locator.find_job(job_id)
    assert found is not None and found.queue == Q
    with pytest.raises(redis.exceptions.ConnectionError):
        finder.locator.find_job(other)  # no known queue has its tag: the error, not a false 404
    monkeypatch.setattr("shared.engine.job_locator.is_cluster", lambda client: False)
    with pytest.raises(redis.exceptions.ConnectionError):
        finder.locator.find_job(job_id)  # one Redis: nothing else would answer, so the error
