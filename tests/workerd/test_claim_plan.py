"""Claim planning stepped by hand on a fake clock: the queue order, the skip lists and the
idle wait, as workerd.claim_plan decides them (no Redis, no sleeping).

The same decisions on a real Redis, through a stepped worker, are in test_worker_pause.py and
test_routing.py; end to end in real processes in test_queues.py and test_pause_quiet.py.
"""

from __future__ import annotations

import logging
import random
from collections import Counter

import pytest

from shared.engine.engine_types import NotRunnable
from shared.model.queues import QueuePlan, parse_worker_queues
from tests.fakes import FakeClock
from workerd.claim_plan import ClaimPlanner, ClaimTimings, IdleWait
from workerd.routing import LEAVE_FOR, Routing

TIMINGS = ClaimTimings(
    wake_timeout=1.0,
    empty_recheck=0.2,
    paused_recheck=1.0,
    claim_anyway_every=3,
    cluster_set_aside=0.5,
)


def planner(
    plan: str = "a,b,c",
    *,
    clock: FakeClock | None = None,
    other_hosts: tuple[str, ...] = (),
    rng: random.Random | None = None,
    first_turn: int = 0,
) -> ClaimPlanner:
    """A planner of one worker serving `plan`; `other_hosts` run every type it does not."""
    clock = clock or FakeClock()
    routing = Routing(
        {"mine"}, lambda queue, job_type: list(other_hosts), worker_id="w1", clock=clock
    )
    return ClaimPlanner(
        parse_worker_queues(plan),
        routing,
        clock=clock,
        timings=TIMINGS,
        rng=rng,
        first_turn=first_turn,
    )


def test_a_strict_plan_is_tried_in_order_every_claim() -> None:
    plans = planner("a,b,c")
    assert plans.next_order() == ("a", "b", "c")
    assert plans.next_order() == ("a", "b", "c")  # drawn anew: nothing kept


def test_a_weighted_plan_puts_each_queue_first_in_proportion_to_its_weight() -> None:
    plans = planner("a:6,b:3,c:1", rng=random.Random(7))
    firsts = Counter(plans.next_order()[0] for _ in range(3000))
    assert firsts["a"] > firsts["b"] > firsts["c"] > 0
    assert abs(firsts["a"] / 3000 - 0.6) < 0.05
    assert abs(firsts["c"] / 3000 - 0.1) < 0.05


def test_a_weighted_order_is_the_plans_own_draw_on_the_given_rng() -> None:
    plan = QueuePlan(("a", "b", "c"), (6, 3, 1))
    plans = planner(plan.describe(), rng=random.Random(11))
    expected = random.Random(11)
    for _ in range(20):
        assert plans.next_order() == plan.order(expected)


def test_a_queue_found_empty_is_skipped_until_the_recheck_is_due() -> None:
    clock = FakeClock()
    plans = planner("a,b,c", clock=clock)
    plans.found_empty("a")

    assert plans.next_order() == ("b", "c")
    clock.now += TIMINGS.empty_recheck - 0.01
    assert plans.next_order() == ("b", "c")
    clock.now += 0.01
    assert plans.next_order() == ("a", "b", "c")


def test_a_complete_claims_next_only_from_the_queue_the_next_order_tries_first() -> None:
    plans = planner("a,b")
    assert plans.complete_claims_from("a") is True
    plans.completed("a", claimed_next=True)
    assert plans.order == ()  # spent: the next claim draws again

    assert plans.complete_claims_from("b") is False
    assert plans.next_order() == ("a", "b")  # kept for the claim that follows


def test_a_complete_that_found_its_queue_empty_goes_on_with_the_rest_of_the_order() -> None:
    plans = planner("a,b,c")
    assert plans.complete_claims_from("a")
    plans.completed("a", claimed_next=False)

    assert plans.claim_now  # b and c are still to be asked
    assert plans.next_order() == ("b", "c")
    assert plans.next_order() == ("b", "c")  # a skipped: found empty just now


def test_a_complete_that_found_its_only_queue_empty_waits_for_a_hint() -> None:
    plans = planner("a")
    assert plans.complete_claims_from("a")
    plans.completed("a", claimed_next=False)
    assert not plans.claim_now


def test_a_paused_queue_leaves_the_order_and_the_wake_lists_until_a_recheck_resumes_it() -> None:
    clock = FakeClock()
    plans = planner("a,b", clock=clock)
    plans.found_paused("a")

    assert plans.next_order() == ("b",)
    assert plans.idle_wait() == IdleWait(("b",))
    assert plans.paused_to_recheck() == []  # asked only once the recheck is due
    clock.now += TIMINGS.paused_recheck
    assert plans.paused_to_recheck() == ["a"]
    assert plans.paused_to_recheck() == []  # the next ask is a recheck later

    plans.found_empty("a")
    plans.claim_now = False
    plans.resumed("a")
    assert plans.claim_now
    assert plans.next_order() == ("a", "b")  # at once, even if found empty before


def test_the_paused_recheck_counts_from_the_first_queue_found_paused() -> None:
    clock = FakeClock()
    plans = planner("a,b,c", clock=clock)
    plans.found_paused("a")
    clock.now += 0.9
    plans.found_paused("b")  # joins the same recheck
    clock.now += 0.1
    assert plans.paused_to_recheck() == ["a", "b"]


def test_with_every_queue_paused_the_idle_wait_sleeps_without_redis() -> None:
    plans = planner("a,b")
    plans.found_paused("b")
    plans.found_paused("a")
    assert plans.next_order() == ()
    assert plans.idle_wait() == IdleWait((), sleep=TIMINGS.wake_timeout, claim_after=False)


def test_a_queue_left_to_other_hosts_is_out_of_the_order_and_the_wait_until_it_is_due() -> None:
    clock = FakeClock()
    plans = planner("a,b", clock=clock, other_hosts=("host-b",))
    assert plans.routing.take(NotRunnable("a", "theirs")) is False  # left for LEAVE_FOR

    assert plans.next_order() == ("b",)
    assert plans.idle_wait() == IdleWait(("b",))
    clock.now += LEAVE_FOR
    assert plans.next_order() == ("a", "b")


def test_with_every_queue_left_to_others_the_worker_sleeps_until_the_first_is_due() -> None:
    clock = FakeClock()
    plans = planner("a", clock=clock, other_hosts=("host-b",))
    plans.routing.take(NotRunnable("a", "theirs"))

    # A second at most per wait, then a claim: the queue may be due by then.
    assert plans.idle_wait() == IdleWait((), sleep=TIMINGS.wake_timeout, claim_after=True)
    clock.now += LEAVE_FOR - 0.3
    assert plans.idle_wait() == IdleWait((), sleep=pytest.approx(0.3), claim_after=True)
    clock.now += 0.3
    assert plans.idle_wait() == IdleWait(("a",))


def test_a_hint_says_claim_and_asks_its_queue_even_if_found_empty() -> None:
    plans = planner("a,b")
    plans.found_empty("a")
    assert plans.waited("a") is True
    assert plans.next_order() == ("a", "b")


def test_without_hints_the_worker_claims_anyway_every_few_waits() -> None:
    plans = planner("a,b")
    plans.found_empty("a")
    decisions = [plans.waited(None) for _ in range(2 * TIMINGS.claim_anyway_every)]
    assert decisions == [False, False, True, False, False, True]
    assert plans.next_order() == ("a", "b")  # the safety net asks every queue again


def test_a_queue_whose_master_failed_is_set_aside_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    plans = planner("a,b", clock=clock)
    caplog.set_level(logging.WARNING, logger="workerd.claim_plan")
    plans.claim_retry["a"] = "req-1"  # its claim raised: to repeat once a is back

    plans.set_aside("a", ConnectionError("down"))
    plans.set_aside("a", ConnectionError("still down"))

    assert [r.getMessage() for r in caplog.records] == ["queue_unreachable"]
    assert plans.next_order() == ("b",)
    assert plans.idle_wait() == IdleWait(("b",))
    assert list(plans.retries()) == []
    clock.now += TIMINGS.cluster_set_aside
    assert plans.next_order() == ("a", "b")
    assert list(plans.retries()) == [("a", "req-1")]


def test_with_every_master_failed_setting_aside_raises_so_the_step_backs_off() -> None:
    plans = planner("a,b")
    plans.set_aside("a", ConnectionError("a down"))
    error = ConnectionError("b down")
    with pytest.raises(ConnectionError) as raised:
        plans.set_aside("b", error)
    assert raised.value is error


def test_a_clusters_idle_worker_blocks_on_each_wake_list_in_turn() -> None:
    plans = planner("a,b,c", first_turn=4)
    turns = [plans.cluster_turn(("a", "b", "c")) for _ in range(4)]
    assert turns == ["c", "a", "b", "c"]  # from its own start: workers start apart


def test_two_planners_share_nothing() -> None:
    clock = FakeClock()
    one, two = planner("a,b", clock=clock), planner("a,b", clock=clock)
    one.found_empty("a")
    one.found_paused("b")
    assert two.next_order() == ("a", "b")
