"""QueuePlan.order: strict plans keep their order; weighted ones draw it in proportion to weight.

Draws use a seeded random.Random, so each figure below is reproducible; the tolerances are
still set at several standard deviations, so a change of seed would not fail them.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from itertools import permutations

import pytest

from shared.model.queues import QueuePlan, parse_worker_queues

DRAWS = 100_000


def first_counts(plan: QueuePlan, draws: int = DRAWS, seed: int = 14) -> Counter[str]:
    """Return how often each queue came first over `draws` orders."""
    rng = random.Random(seed)
    return Counter(plan.order(rng)[0] for _ in range(draws))


def within_sigmas(count: int, draws: int, p: float, sigmas: float = 5.0) -> bool:
    """Tell whether `count` successes in `draws` is within `sigmas` of a binomial(p)'s mean."""
    return abs(count - draws * p) <= sigmas * math.sqrt(draws * p * (1 - p))


@pytest.mark.parametrize("text", ["critical,default,low", "solo", "b,a"])
def test_a_strict_plan_always_tries_its_queues_in_the_order_given(text: str) -> None:
    plan = parse_worker_queues(text)
    rng = random.Random(1)

    orders = {plan.order(rng) for _ in range(1_000)}

    assert orders == {tuple(text.split(","))}
    assert not plan.weighted


def test_a_weighted_plan_puts_each_queue_first_in_proportion_to_its_weight() -> None:
    plan = parse_worker_queues("critical:6,default:3,low:1")

    counts = first_counts(plan)

    assert sum(counts.values()) == DRAWS
    for name, weight in (("critical", 6), ("default", 3), ("low", 1)):
        share = counts[name] / DRAWS
        assert within_sigmas(counts[name], DRAWS, weight / 10), (name, share)
        assert share == pytest.approx(weight / 10, abs=0.01), (name, share)


def test_a_weighted_order_is_a_draw_without_replacement_by_weight() -> None:
    # P(x, y, z) = w_x / W · w_y / (W - w_x): the next queue is drawn among those left, so the
    # second place is weighted too (after critical, default is three times as likely as low).
    weights = {"critical": 6, "default": 3, "low": 1}
    plan = parse_worker_queues("critical:6,default:3,low:1")
    rng = random.Random(7)

    counts = Counter(plan.order(rng) for _ in range(DRAWS))

    for order in permutations(weights):
        x, y, _ = order
        p = weights[x] / 10 * weights[y] / (10 - weights[x])
        assert within_sigmas(counts[order], DRAWS, p), (order, counts[order] / DRAWS, p)


def test_every_queue_is_in_every_weighted_order_once() -> None:
    plan = parse_worker_queues("a:1000,b:1,c:500,d:1,e:7")
    rng = random.Random(3)

    for _ in range(10_000):
        order = plan.order(rng)
        assert sorted(order) == sorted(plan.names)


def test_a_weight_one_queue_among_weight_1000_ones_still_comes_first_sometimes() -> None:
    plan = parse_worker_queues("big1:1000,big2:1000,big3:1000,small:1")

    counts = first_counts(plan, draws=300_000)

    # 1 in 3,001 draws: about 100 of 300,000, never none.
    assert within_sigmas(counts["small"], 300_000, 1 / 3001)
    assert counts["small"] > 0


def test_a_single_weighted_queue_is_its_own_order() -> None:
    plan = parse_worker_queues("only:5")

    assert plan.weighted and plan.order(random.Random(0)) == ("only",)


def test_describe_writes_the_plan_back_as_worker_queues_takes_it() -> None:
    for text in ("critical,default,low", "critical:6,default:3,low:1"):
        assert parse_worker_queues(text).describe() == text
        assert parse_worker_queues(parse_worker_queues(text).describe()) == parse_worker_queues(
            text
        )
