"""Who sends what, and when, in a group commit (shared.engine.scripts.group_commit), with
senders the test holds and releases: a lone call goes at once and alone, calls made while one
is in flight go together after it, led by the first of them, each answered with its own reply
or error; a stuck sender's followers give up at the wait limit and nothing is left waiting.

The same path against a real redis-server: tests/engine/test_shared_requests.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from shared.engine.scripts import group_commit
from shared.engine.scripts.group_commit import GroupCommit, GroupedCall

WAIT = 10.0  # seconds any step of these tests may take before it counts as hung


class Senders:
    """Stub senders that record each request; a request waits while `hold` is clear."""

    def __init__(self) -> None:
        self.requests: list[list[str]] = []  # the names in each request, in order sent
        self.hold = threading.Event()
        self.hold.set()
        self.hold_together = threading.Event()  # and a request of several calls this
        self.hold_together.set()
        self.fail_together: BaseException | None = None
        self.answered_before_failing = 0  # calls of a failing request answered first
        self.abandoned: list[list[bool]] = []  # each request's calls given up, as it was sent
        self.dies: dict[str, BaseException] = {}  # raised by the sender of a lone call, by name
        self.errors: dict[str, Exception] = {}  # a call's own error reply, by name

    def alone(self, call: GroupedCall) -> Any:
        self.requests.append([call.name])
        assert self.hold.wait(WAIT)
        if call.name in self.dies:
            raise self.dies[call.name]
        if call.name in self.errors:
            raise self.errors[call.name]
        return f"reply:{call.name}"

    def together(self, calls: list[GroupedCall]) -> None:
        self.requests.append([call.name for call in calls])
        assert self.hold.wait(WAIT) and self.hold_together.wait(WAIT)
        self.abandoned.append([call.abandoned for call in calls])
        if self.fail_together is not None:
            for call in calls[: self.answered_before_failing]:
                call.value, call.replied = f"reply:{call.name}", True
            raise self.fail_together
        for call in calls:
            if call.name in self.errors:
                call.error = self.errors[call.name]
            else:
                call.value = f"reply:{call.name}"
            call.replied = True


@pytest.fixture
def senders() -> Senders:
    return Senders()


@pytest.fixture
def group(senders: Senders) -> GroupCommit:
    return GroupCommit(senders.alone, senders.together, wait_limit=WAIT)


class Caller:
    """A thread making one call; `outcome` is its reply or the exception it raised."""

    def __init__(self, group: GroupCommit, name: str) -> None:
        self.outcome: Any = None
        self.thread = threading.Thread(target=self._run, args=(group, name), daemon=True)
        self.thread.start()

    def _run(self, group: GroupCommit, name: str) -> None:
        try:
            self.outcome = group.call(name, [], [])
        except BaseException as err:
            self.outcome = err

    def joined(self) -> Any:
        self.thread.join(WAIT)
        assert not self.thread.is_alive()
        return self.outcome


def until(condition: Callable[[], bool]) -> None:
    """Wait for a state another thread reaches (polled: it has no event of its own)."""
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "the state was not reached"
        time.sleep(0.001)


@pytest.fixture
def in_flight(senders: Senders, group: GroupCommit) -> Iterator[Caller]:
    """A first call held in flight (its request sent, no reply yet)."""
    senders.hold.clear()
    first = Caller(group, "first")
    until(lambda: len(senders.requests) == 1)
    yield first
    senders.hold.set()


def queue_behind(group: GroupCommit, *names: str) -> list[Caller]:
    callers = []
    for count, name in enumerate(names, 1):
        callers.append(Caller(group, name))
        until(lambda count=count: len(group._queue) == count)
    return callers


def test_a_call_with_none_in_flight_goes_at_once_and_alone(
    senders: Senders, group: GroupCommit
) -> None:
    assert group.call("a", [], []) == "reply:a"
    assert group.call("b", [], []) == "reply:b"
    assert senders.requests == [["a"], ["b"]]
    assert group._in_flight == 0


def test_calls_made_while_one_is_in_flight_go_after_it_in_one_request(
    senders: Senders, group: GroupCommit, in_flight: Caller
) -> None:
    waiting = queue_behind(group, "b", "c", "d")
    assert senders.requests == [["first"]]  # nothing sent for them while the first flies
    senders.hold.set()
    assert in_flight.joined() == "reply:first"
    assert [caller.joined() for caller in waiting] == ["reply:b", "reply:c", "reply:d"]
    assert senders.requests == [["first"], ["b", "c", "d"]]
    assert group._in_flight == 0 and group._queue == []


def test_calls_made_while_a_batch_is_in_flight_form_the_next_batch(
    senders: Senders, group: GroupCommit, in_flight: Caller
) -> None:
    second = queue_behind(group, "b", "c")
    # Let the first reply come: b then leads [b, c], whose request the test holds.
    senders.hold_together.clear()
    senders.hold.set()
    until(lambda: len(senders.requests) == 2)
    third = queue_behind(group, "d", "e")
    senders.hold_together.set()
    assert [c.joined() for c in (in_flight, *second, *third)] == [
        f"reply:{name}" for name in ["first", "b", "c", "d", "e"]
    ]
    assert senders.requests == [["first"], ["b", "c"], ["d", "e"]]


def test_one_call_queued_alone_is_sent_alone(
    senders: Senders, group: GroupCommit, in_flight: Caller
) -> None:
    (second,) = queue_behind(group, "b")
    senders.hold.set()
    assert second.joined() == "reply:b"
    assert senders.requests == [["first"], ["b"]]


def test_a_calls_own_error_reply_reaches_only_that_call(
    senders: Senders, group: GroupCommit, in_flight: Caller
) -> None:
    senders.errors["c"] = redis.ResponseError("boom")
    b, c, d = queue_behind(group, "b", "c", "d")
    senders.hold.set()
    assert (b.joined(), d.joined()) == ("reply:b", "reply:d")
    assert c.joined() is senders.errors["c"]


def test_a_request_that_fails_as_a_whole_fails_each_call_in_it_with_its_own_copy(
    senders: Senders, group: GroupCommit, in_flight: Caller
) -> None:
    senders.fail_together = redis.ConnectionError("Connection reset by peer")
    b, c = queue_behind(group, "b", "c")
    senders.hold.set()
    assert in_flight.joined() == "reply:first"  # its own request was not that one
    raised = [b.joined(), c.joined()]
    assert all(isinstance(err, redis.ConnectionError) for err in raised)
    assert [str(err) for err in raised] == ["Connection reset by peer"] * 2
    assert all(err.__cause__ is senders.fail_together for err in raised)
    assert raised[0] is not raised[1]  # each thread raises an exception of its own
    senders.fail_together = None
    assert group.call("after", [], []) == "reply:after"  # the group went idle, not stuck
    assert senders.requests[-1] == ["after"]


def test_calls_answered_before_their_request_failed_keep_their_replies(
    senders: Senders, group: GroupCommit, in_flight: Caller
) -> None:
    """The thread sending the request too: its own call answered, it reports that call's
    reply, not the failure that came after it (an enqueue that was made says so)."""
    senders.fail_together = redis.TimeoutError("Timeout reading from socket")
    senders.answered_before_failing = 2
    b, c, d = queue_behind(group, "b", "c", "d")
    senders.hold.set()
    assert (b.joined(), c.joined()) == ("reply:b", "reply:c")
    assert isinstance(d.joined(), redis.TimeoutError)


def test_a_sender_that_stops_tells_the_others_their_effect_is_unknown(
    senders: Senders, group: GroupCommit, in_flight: Caller
) -> None:
    """Its SystemExit (gunicorn's abort) is its own: raised in another request's thread it
    would stop that thread's worker too."""
    senders.fail_together = SystemExit(1)
    b, c = queue_behind(group, "b", "c")
    senders.hold.set()
    assert isinstance(b.joined(), SystemExit)  # the sender's own
    told = c.joined()
    assert isinstance(told, redis.ConnectionError)
    assert "its effect is unknown" in str(told)
    senders.fail_together = None
    assert group.call("after", [], []) == "reply:after"


def test_a_leader_that_dies_still_hands_the_queue_on(
    senders: Senders, group: GroupCommit, in_flight: Caller
) -> None:
    """A BaseException in the thread in flight (gunicorn's abort of a worker, say) must not
    leave the calls behind it waiting for a request nobody sends."""
    senders.dies["first"] = KeyboardInterrupt()
    (waiting,) = queue_behind(group, "b")
    senders.hold.set()
    assert isinstance(in_flight.joined(), KeyboardInterrupt)
    assert waiting.joined() == "reply:b"


def test_a_call_behind_a_stuck_one_gives_up_at_the_wait_limit_unsent(senders: Senders) -> None:
    group = GroupCommit(senders.alone, senders.together, wait_limit=0.2)
    senders.hold.clear()
    stuck = Caller(group, "stuck")
    until(lambda: len(senders.requests) == 1)
    started = time.monotonic()
    with pytest.raises(redis.TimeoutError, match="it was not sent"):
        group.call("late", [], [])  # this thread waits behind the stuck request
    assert 0.2 <= time.monotonic() - started < WAIT
    assert group._queue == []  # it left the queue: nobody will send it
    senders.hold.set()
    assert stuck.joined() == "reply:stuck"
    assert group._in_flight == 0
    assert senders.requests == [["stuck"]]


def test_a_call_that_gives_up_inside_a_request_in_flight_says_its_effect_is_unknown(
    senders: Senders,
) -> None:
    # Long enough for b to be handed the batch after `lead` returns (a handover takes
    # microseconds); the batch is then held past it.
    group = GroupCommit(senders.alone, senders.together, wait_limit=5.0)
    senders.hold.clear()
    senders.hold_together.clear()
    lead = Caller(group, "lead")
    until(lambda: len(senders.requests) == 1)
    b, c = queue_behind(group, "b", "c")
    senders.hold.set()
    until(lambda: len(senders.requests) == 2)  # b sent [b, c] and waits for its reply
    assert lead.joined() == "reply:lead"
    raised = c.joined()  # c gives up while its request is in flight
    assert isinstance(raised, redis.TimeoutError)
    assert "its effect is unknown" in str(raised)
    senders.hold_together.set()
    assert b.joined() == "reply:b"  # the one sending is not cut short
    # The request learns that c's caller gave up: not sent if not yet written (the
    # transport's _exchange, tests/engine/test_shared_requests.py).
    assert senders.abandoned == [[False, True]]
    assert senders.requests == [["lead"], ["b", "c"]]
    assert group._in_flight == 0


class _InterruptedOnWaking:
    """A call's `ready` lock whose waiter is interrupted as it wakes (a signal handler's
    exception raised in a main thread as its wait ends)."""

    def __init__(self, lock: Any) -> None:
        self.lock = lock

    def acquire(self, timeout: float) -> bool:
        assert self.lock.acquire(timeout=timeout)
        raise KeyboardInterrupt

    def release(self) -> None:
        self.lock.release()


def test_a_caller_interrupted_as_it_is_handed_a_batch_fails_it_unsent_and_moves_on(
    senders: Senders, group: GroupCommit, in_flight: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Interrupted(group_commit.GroupedCall):
        def __init__(self, name: str, keys: list[Any], args: list[Any]) -> None:
            super().__init__(name, keys, args)
            if name == "b":
                self.ready = _InterruptedOnWaking(self.ready)

    monkeypatch.setattr(group_commit, "GroupedCall", Interrupted)
    b, c = queue_behind(group, "b", "c")
    senders.hold.set()
    assert in_flight.joined() == "reply:first"
    assert isinstance(b.joined(), KeyboardInterrupt)
    told = c.joined()
    assert isinstance(told, redis.ConnectionError) and "was not sent" in str(told)
    assert senders.requests == [["first"]]  # nothing went for b and c
    assert group.call("after", [], []) == "reply:after"
    assert group._in_flight == 0


def test_with_two_requests_allowed_in_flight_the_second_call_goes_at_once_and_the_third_waits(
    senders: Senders,
) -> None:
    group = GroupCommit(senders.alone, senders.together, wait_limit=WAIT, at_once=2)
    senders.hold.clear()
    first = Caller(group, "first")
    second = Caller(group, "second")
    until(lambda: len(senders.requests) == 2)  # both sent, neither answered
    assert group._queue == [] and group._in_flight == 2
    third, fourth = queue_behind(group, "third", "fourth")
    senders.hold.set()
    assert [c.joined() for c in (first, second, third, fourth)] == [
        "reply:first",
        "reply:second",
        "reply:third",
        "reply:fourth",
    ]
    assert sorted(map(tuple, senders.requests)) == [("first",), ("second",), ("third", "fourth")]
    assert group._in_flight == 0


def test_a_place_in_flight_is_handed_on_once_however_often_its_holder_is_done(
    senders: Senders, group: GroupCommit
) -> None:
    """An interrupted thread may reach its hand-on twice (its batch's and its own way out):
    the second must not free a place a second time, or more requests than allowed fly."""
    holder = GroupedCall("a", [], [])
    holder.holds, group._in_flight = True, 1
    group._pass_on(holder)
    group._pass_on(holder)
    assert group._in_flight == 0
    assert group.call("b", [], []) == "reply:b"
    assert group._in_flight == 0


def test_no_requests_in_flight_allowed_is_refused(senders: Senders) -> None:
    with pytest.raises(ValueError, match="at_once"):
        GroupCommit(senders.alone, senders.together, wait_limit=WAIT, at_once=0)


def test_calls_behind_a_request_redis_did_not_answer_fail_at_once_unsent(
    senders: Senders, group: GroupCommit, in_flight: Caller
) -> None:
    """Redis frozen: sent after the request that timed out, each would wait a whole timeout
    more (a 503 in twice the time: tests/faults/test_redis_faults.py, scenario 8)."""
    senders.dies["first"] = redis.TimeoutError("Timeout reading from socket")
    b, c = queue_behind(group, "b", "c")
    senders.hold.set()
    assert isinstance(in_flight.joined(), redis.TimeoutError)
    for told in (b.joined(), c.joined()):
        assert isinstance(told, redis.ConnectionError) and "was not sent" in str(told)
    assert senders.requests == [["first"]]
    assert group._in_flight == 0
    assert group.call("after", [], []) == "reply:after"  # the next goes by itself


def test_calls_behind_a_request_whose_script_failed_are_still_sent(
    senders: Senders, group: GroupCommit, in_flight: Caller
) -> None:
    senders.errors["first"] = redis.ResponseError("boom")
    b, c = queue_behind(group, "b", "c")
    senders.hold.set()
    assert isinstance(in_flight.joined(), redis.ResponseError)
    assert (b.joined(), c.joined()) == ("reply:b", "reply:c")
    assert senders.requests == [["first"], ["b", "c"]]
