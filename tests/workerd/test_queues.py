"""WORKER_QUEUES end to end: a real ``python -m workerd`` serving several queues on a real Redis.

With one worker process the journal's start lines, in file order, are the order jobs ran in
(one ``write`` each, O_APPEND), so a test reads the queue order off them. Jobs are enqueued
through the engine as the gateway would (the queue listed first, then one MULTI/EXEC a batch).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any

import redis

from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, format_ms, validate_enqueue
from shared.read.directory import QueueDirectory
from tests.support.tools import wait_until
from tests.support.workerd import Workerd
from tests.workerd.conftest import Journal
from workerd.claim_plan import ClaimTimings

Start = Callable[..., Workerd]


class Producer:
    """Enqueues journal jobs into named queues and reads their state back."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self.scripts = Scripts(client, Keys())
        self.directory = QueueDirectory(self.scripts)
        self.queue_of: dict[str, str] = {}

    def fill(self, queue: str, count: int, payload: dict[str, Any], **fields: Any) -> list[str]:
        """Enqueue `count` journal jobs into `queue` in one batch; return their ids in order."""
        self.directory.ensure(queue)
        body = {"type": "journal", "payload": payload, "queue": queue, **fields}
        batch = [(validate_enqueue(body), str(uuid.uuid4())) for _ in range(count)]
        results = self.scripts.enqueue_many(batch)
        assert all(result.created for result in results)
        ids = [job_id for _, job_id in batch]
        self.queue_of.update(dict.fromkeys(ids, queue))
        return ids

    def count(self, queue: str, state: JobState) -> int:
        """Return how many of `queue`'s jobs are in `state`."""
        return self.redis.zcard(self.scripts.q(queue).state_index(state))

    def wait_completed(self, counts: dict[str, int], timeout: float) -> None:
        """Wait until each queue has completed the given number of jobs."""
        wait_until(
            lambda: all(self.count(q, JobState.COMPLETED) >= n for q, n in counts.items()),
            timeout,
            f"completed jobs {counts}",
        )

    def queues_run(self, journal: Journal) -> list[str]:
        """Return the queue of each job the journal saw start, in start order."""
        return [self.queue_of[entry["id"]] for entry in journal.entries("start")]


def runs(sequence: Sequence[str]) -> list[str]:
    """Return the sequence with repeats collapsed: a,a,b,b,a → a,b,a."""
    return [item for n, item in enumerate(sequence) if n == 0 or sequence[n - 1] != item]


def test_strict_order_runs_every_job_of_a_queue_before_any_of_the_next(
    r: redis.Redis, start_workerd: Start, journal: Journal
) -> None:
    producer = Producer(r)
    payload = {"file": journal.file}
    # Enqueued lowest queue first, so neither enqueue order nor age explains the run order.
    low = producer.fill("low", 15, payload, priority=100)
    default = producer.fill("default", 15, payload)
    critical = producer.fill("critical", 10, payload, priority=-5)
    critical += producer.fill("critical", 5, payload, priority=5)

    start_workerd(WORKER_COUNT="1", WORKER_QUEUES="critical,default,low")
    producer.wait_completed({"critical": 15, "default": 15, "low": 15}, timeout=30)

    order = producer.queues_run(journal)
    assert runs(order) == ["critical", "default", "low"], order
    started = [entry["id"] for entry in journal.entries("start")]
    # Priority inside the queue: the five priority-5 critical jobs first, each part FIFO.
    assert started[:15] == critical[10:] + critical[:10]
    assert started[15:30] == default
    assert started[30:] == low


def test_weighted_order_shares_the_worker_by_weight_and_starves_no_queue(
    r: redis.Redis, start_workerd: Start, journal: Journal
) -> None:
    runs_counted, each = 600, 600  # every queue stays busy over the first 600 runs
    producer = Producer(r)
    for queue in ("a", "b", "c"):
        producer.fill(queue, each, {"file": journal.file})

    start_workerd(WORKER_COUNT="1", WORKER_QUEUES="a:6,b:3,c:1")
    journal.wait_for("start", count=runs_counted, timeout=60)

    order = producer.queues_run(journal)[:runs_counted]
    shares = Counter(order)
    # Binomial bounds at 5 standard deviations: a fair worker fails them about once in 10^6.
    for queue, p in (("a", 0.6), ("b", 0.3), ("c", 0.1)):
        sigma = (runs_counted * p * (1 - p)) ** 0.5
        assert abs(shares[queue] - runs_counted * p) <= 5 * sigma, (queue, shares)
    # Never starved: c runs within every 200 consecutive jobs (a gap that long has odds
    # 0.9^200, about 10^-9, per position).
    gaps = [n for n, queue in enumerate(order) if queue == "c"]
    bounds = [-1, *gaps, runs_counted]
    assert max(b - a for a, b in pairwise(bounds)) <= 200, gaps


def test_a_worker_never_touches_a_queue_it_does_not_serve(
    r: redis.Redis, start_workerd: Start, journal: Journal
) -> None:
    producer = Producer(r)
    payload = {"file": journal.file}
    others = producer.fill("b", 5, payload, priority=100)
    kb = producer.scripts.q("b")
    before = {key: r.dump(key) for key in (kb.pending, kb.pending_since, kb.wake, kb.seq)}
    hashes = {job_id: r.hgetall(kb.job(job_id)) for job_id in others}
    producer.fill("a", 5, payload)

    workerd = start_workerd(WORKER_COUNT="2", WORKER_QUEUES="a")
    producer.wait_completed({"a": 5}, timeout=15)
    # Both workers idle on a's wake list now; one more job of a proves they still serve.
    later = producer.fill("a", 1, payload)
    producer.wait_completed({"a": 6}, timeout=15)

    assert {entry["id"] for entry in journal.entries("start")}.isdisjoint(others)
    after = {key: r.dump(key) for key in before}
    # b's jobs still pending, untouched, and its wake hints never taken (no BLPOP on b).
    assert after == before
    assert {job_id: r.hgetall(kb.job(job_id)) for job_id in others} == hashes
    assert producer.count("b", JobState.PROCESSING) == 0
    assert workerd.events("job_started", job_id=later[0])  # the field the check below reads
    assert not any(workerd.events("job_started", job_id=job_id) for job_id in others)
    assert later[0] in {entry["id"] for entry in journal.entries("end")}


def test_a_job_for_a_higher_queue_overtakes_a_busy_worker_within_the_recheck(
    r: redis.Redis, start_workerd: Start, journal: Journal
) -> None:
    job_seconds = 0.05
    producer = Producer(r)
    producer.fill("low", 80, {"file": journal.file, "sleep": job_seconds})  # 4 s of work
    producer.directory.ensure("high")

    start_workerd(WORKER_COUNT="1", WORKER_QUEUES="high,low")
    journal.wait_for("start", count=5, timeout=15)  # busy on low, high found empty
    urgent = producer.fill("high", 1, {"file": journal.file})[0]
    landed = time.time()  # the urgent job is in Redis: high found empty before this
    journal.wait_for("start", urgent, timeout=15)

    # Counted in jobs, not seconds, so a loaded machine cannot fail it: after the urgent job
    # lands, the worker asks high again at most one recheck after it last found it empty,
    # and each low job it starts meanwhile takes at least job_seconds. A fused
    # complete-and-claim-next per job would keep it on low for all 80.
    starts = journal.entries("start")
    urgent_at = next(n for n, entry in enumerate(starts) if entry["id"] == urgent)
    low_meanwhile = [entry for entry in starts[:urgent_at] if entry["start"] >= landed]
    most = int(ClaimTimings().empty_recheck / job_seconds) + 1
    assert len(low_meanwhile) <= most, (len(low_meanwhile), most)
    order = producer.queues_run(journal)
    assert "low" in order[order.index("high") + 1 :] or producer.count("low", JobState.PENDING), (
        "high did not overtake: low was drained first"
    )


def test_a_served_queue_the_list_lost_is_listed_again_and_its_scheduled_job_runs(
    r: redis.Redis, start_workerd: Start, journal: Journal
) -> None:
    producer = Producer(r)
    soon = format_ms(int(time.time() * 1000) + 300)
    job_id = producer.fill("x", 1, {"file": journal.file}, scheduled_at=soon)[0]
    # The list forgets x, as after a failover that dropped the producer's SADD: the producer
    # lists a queue once per process and will not list it again.
    r.delete(producer.scripts.keys.queues)

    workerd = start_workerd(WORKER_COUNT="1", WORKER_QUEUES="x")

    journal.wait_for("end", job_id, timeout=10)  # promoted by the scheduler, then run
    assert producer.scripts.queue_names() == ["default", "x"]
    [relisted] = workerd.wait_for("queues_relisted", queues=["x"])
    assert relisted["level"] == "WARNING", relisted  # x had a job: the list lost it


def test_a_served_queue_that_never_had_a_job_is_listed_without_a_warning(
    r: redis.Redis, start_workerd: Start
) -> None:
    workerd = start_workerd(WORKER_COUNT="1", WORKER_QUEUES="fresh")

    [relisted] = workerd.wait_for("queues_relisted", queues=["fresh"])
    assert relisted["level"] == "INFO", relisted  # a new deployment, nothing lost
