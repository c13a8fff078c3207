"""complete.lua's `holding`: a repeated completion (its reply lost) answers with the job the
first call claimed, never with the job the worker has in hand meanwhile (workerd.prefetch:
it runs one job while the completion it sent claims the next)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from shared.engine.scripts import Scripts
from shared.model.jobs import Job, validate_enqueue


@pytest.mark.parametrize("events_cap", [1000, 0], ids=["events-on", "events-off"])
def test_a_repeat_answers_with_the_job_the_lost_call_claimed_not_the_one_in_hand(
    make_scripts: Callable[..., Scripts], events_cap: int
) -> None:
    scripts = make_scripts(events_cap=events_cap)
    request = validate_enqueue({"type": "t"})
    ids = [scripts.enqueue(request, str(uuid.uuid4())).job_id for _ in range(4)]
    running, in_hand = scripts.claim("w"), scripts.claim("w")
    assert isinstance(running, Job) and isinstance(in_hand, Job)
    # The completion sent while `in_hand` waits claims the next job; its reply is lost.
    lost = scripts.complete(running.id, running.token, claim_next_for="w", holding=in_hand.id)
    assert isinstance(lost.next_job, Job) and lost.next_job.id == ids[2]
    # The supervisor renews the lease of the job in hand once it runs: its deadline is now
    # the latest of the two, which a repeat that did not know the job in hand would answer.
    later = int(time.time() * 1000) + 60_000
    scripts.renew([(in_hand.id, in_hand.token)], now_ms=later)

    repeat = scripts.complete(running.id, running.token, claim_next_for="w", holding=in_hand.id)

    assert isinstance(repeat.next_job, Job) and repeat.next_job.id == ids[2]
    assert repeat.next_job.token == lost.next_job.token  # the same claim, not a second one
    blind = scripts.complete(running.id, running.token, claim_next_for="w")
    assert isinstance(blind.next_job, Job) and blind.next_job.id == in_hand.id  # the old answer
