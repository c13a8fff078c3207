"""shared.engine.job_locator: an id finds its queue through its tag, whatever the number of queues.

The single lookups' command counts (a known tag, a new one, a foreign id, a failover) are in
test_delete_queue.py; here: many ids at once, the cache's bound, and that nothing else in the
engine or the gateway resolves an id.
"""

from __future__ import annotations

import pathlib
import re
from collections import Counter

import pytest
import redis

from shared.engine import job_locator
from shared.engine.job_locator import JobLocator
from shared.engine.scripts import Scripts
from shared.read.directory import QueueDirectory
from tests.engine.test_delete_queue import colliding_names, put
from tests.support.tools import commands_caused

ROOT = pathlib.Path(__file__).resolve().parents[2]
FOREIGN = "0badc0de-1234-4567-89ab-0123456789ab"


def test_many_ids_cost_one_read_per_tag_and_one_per_candidate_whatever_the_queues(
    r: redis.Redis, scripts: Scripts
) -> None:
    for n in range(200):
        QueueDirectory(scripts).relist(f"q{n}")
    wanted = [put(scripts, "q7"), put(scripts, "q7"), put(scripts, "q150")]
    locator = JobLocator(scripts)

    spent = commands_caused(r, lambda: locator.locate_many([*wanted, FOREIGN]))

    assert locator.locate_many([*wanted, FOREIGN]) == {
        wanted[0]: "q7",
        wanted[1]: "q7",
        wanted[2]: "q150",
    }
    # Three distinct tags (q7, q150, the foreign one); the foreign id has no candidate.
    assert spent == Counter({"smembers": 3, "exists": 3})


def test_a_foreign_id_is_not_found_after_one_read_of_its_tag(
    r: redis.Redis, scripts: Scripts
) -> None:
    put(scripts, "q1")
    locator = JobLocator(scripts)
    assert commands_caused(r, lambda: locator.locate_many([FOREIGN])) == Counter({"smembers": 1})
    assert locator.locate_many([FOREIGN]) == {}
    assert commands_caused(r, lambda: locator.locate(FOREIGN)) == Counter({"smembers": 1})
    assert locator.locate(FOREIGN) is None


def test_ids_of_two_queues_sharing_a_tag_each_find_their_own(scripts: Scripts) -> None:
    a, b = colliding_names()
    first, second = put(scripts, a), put(scripts, b)
    locator = JobLocator(scripts)
    assert locator.locate_many([first, second]) == {first: a, second: b}
    assert locator.locate_many([first, second], among=[b]) == {second: b}
    found = [locator.find_job(first), locator.find_job(second)]
    assert [(job.id, job.queue) for job in found if job] == [(first, a), (second, b)]


def test_the_tag_memory_is_bounded(scripts: Scripts, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = [put(scripts, f"m{n}") for n in range(5)]
    locator = JobLocator(scripts)
    monkeypatch.setattr(job_locator, "TAG_CACHE_LIMIT", 3)
    for job_id in ids:
        assert locator.find_job(job_id) is not None
        assert 1 <= len(locator._tagged) <= 3


def test_bulk_dlq_by_id_reads_no_list_of_queues(r: redis.Redis, scripts: Scripts) -> None:
    from shared.read.bulk import bulk_dead

    for n in range(50):
        QueueDirectory(scripts).relist(f"q{n}")
    job_id = put(scripts, "q3")
    spent = commands_caused(r, lambda: bulk_dead(scripts, "purge", queues=None, ids=[job_id]))
    # Not dead, so skipped; what matters is what finding it read: its tag's set alone (a read
    # of the list of queues would be a second SMEMBERS).
    assert spent["smembers"] == 1 and "sscan" not in spent


def test_only_the_locator_reads_the_tag_map() -> None:
    """An id is resolved in one place: no other module of the engine or the gateway reads
    queue_tag keys (shared.engine.scripts.queue_scripts writes them with the list of queues)."""
    readers = []
    for path in [*ROOT.glob("shared/**/*.py"), *ROOT.glob("gateway/**/*.py")]:
        text = path.read_text()
        if re.search(r"\.queue_tag\(", text):
            readers.append(str(path.relative_to(ROOT)))
    assert sorted(readers) == [
        "shared/engine/job_locator.py",
        "shared/engine/scripts/queue_scripts.py",
    ]
