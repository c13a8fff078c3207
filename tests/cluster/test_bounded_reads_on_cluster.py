"""Listings without a queue, the limited queues' pages and the served queues on a real cluster:
queues on every master, the served set, the due index and the list of limited queues in the
global slot (shared.read.listing.queues_for, shared.read.queue_view.scan_names)."""

from __future__ import annotations

import time
import uuid

import pytest

from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, validate_enqueue
from shared.read import listing, throughput
from shared.read.queue_view import scan_names

pytestmark = pytest.mark.slow  # a six-node cluster

K = Keys()


def put(engine: Scripts, queue: str, **fields: object) -> str:
    engine.register_queue(queue)
    job_id = str(uuid.uuid4())
    request = validate_enqueue({"type": "seed", "queue": queue, **fields})
    assert engine.enqueue(request, job_id).created
    return job_id


def test_listings_limits_and_throughput_past_the_cap_span_every_master(engine: Scripts) -> None:
    prefix = uuid.uuid4().hex[:6]
    names = [f"{prefix}-{i:03d}" for i in range(listing.EVERY_QUEUE_CAP + 20)]
    for name in names:
        engine.register_queue(name)
    served, busy, due = f"{prefix}-served", f"{prefix}-busy", f"{prefix}-due"
    engine.redis.zadd(K.served, {served: int(time.time() * 1000)})
    ids = {put(engine, served), put(engine, busy), put(engine, busy)}
    soon = put(engine, due, delay=30)

    across = listing.queues_for(engine, JobState.PENDING)
    assert not across.every and {served, busy} <= set(across.queues)
    page = listing.list_jobs(engine, JobState.PENDING, across.queues, limit=100)
    assert ids <= {job.id for job in page.jobs}
    scheduled = listing.queues_for(engine, JobState.SCHEDULED)
    found = listing.list_jobs(engine, JobState.SCHEDULED, scheduled.queues, limit=100)
    assert soon in {job.id for job in found.jobs}

    limited = names[:30]
    for name in limited:
        engine.set_limits(name, '{"c":2}')
    seen: set[str] = set()
    cursor = None
    while True:
        batch, cursor = scan_names(engine, cursor, 10, prefix, key=K.limited)
        seen |= set(batch)
        if cursor is None:
            break
    assert seen == set(limited)

    counted, every = throughput.queues_counted(engine)
    assert not every and served in counted and busy not in counted
