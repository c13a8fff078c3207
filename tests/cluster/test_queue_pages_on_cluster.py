"""Pages of queues and the summary sweep on a real cluster: queues on every master, the list,
the summary and its lock in the global slot (shared.read.queue_view, shared.read.summary)."""

from __future__ import annotations

import uuid

import pytest

from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, validate_enqueue
from shared.read import summary
from shared.read.queue_view import chosen, page

pytestmark = pytest.mark.slow  # a six-node cluster

K = Keys()


def put(engine: Scripts, queue: str) -> None:
    engine.register_queue(queue)
    request = validate_enqueue({"type": "seed", "queue": queue})
    assert engine.enqueue(request, str(uuid.uuid4())).created


def test_pages_and_the_summary_span_every_master(engine: Scripts) -> None:
    names = [f"c{i:03d}" for i in range(120)]
    for name in names:
        engine.register_queue(name)
    for _ in range(2):
        put(engine, "c007")
    put(engine, "c099")
    seen: set[str] = set()
    cursor = None
    while True:
        view = page(engine, limit=25, cursor=cursor)
        assert view.totals is not None and view.totals.by_state[JobState.PENDING] == 3
        seen |= set(view.shown.by_queue)
        cursor = view.next_cursor
        if cursor is None:
            break
    assert seen == {*names, "default"}
    busiest = chosen(engine, limit=25)
    assert list(busiest.shown.by_queue)[:2] == ["c007", "c099"]
    assert summary.read(engine).busiest == [("c007", 2), ("c099", 1)]
