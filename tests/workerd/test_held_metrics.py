"""A real workerd's worker holds its per-job metric writes (shared.obs.held_writes) and reads a
completion's reply late while holding the next job (workerd.prefetch): a SIGKILL loses at most
the counts of its last 0.3 s, never those of jobs finished well before it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from shared.model.jobs import JobState
from shared.obs.held_writes import FLUSH_INTERVAL
from tests.support.tools import wait_until
from tests.support.workerd import Workerd
from tests.workerd.conftest import Engine, Journal

# The killer's run before it SIGKILLs its worker: many flush intervals (and READ_LATEs), so the
# quick jobs' counts are written however late a loaded host wakes the threads.
DIE_AFTER = 10 * FLUSH_INTERVAL


def _completed(workerd: Workerd) -> float:
    status, _, body = workerd.http("/metrics")
    assert status == 200
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name == "taskforge_jobs_completed_total" and sample.labels == {
                "type": "journal",
                "queue": "default",
            }:
                return sample.value
    return 0.0


@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_sigkilled_worker_loses_no_count_of_jobs_finished_an_interval_before(
    start_workerd: Callable[..., Workerd], engine: Engine, journal: Journal, threads: str
) -> None:
    # One worker, a backlog: it goes from job to job without an idle wait (which would flush),
    # so only the flusher thread writes the quick jobs' counts before the killer's SIGKILL. The
    # killer is held (its type is short by then): the last quick job's completion is in flight
    # while it runs, and is read, logged and counted only by the late read (READ_LATE).
    quick = [engine.enqueue("journal", {"file": journal.file}) for _ in range(3)]
    killer = engine.enqueue("journal", {"file": journal.file, "die_after": DIE_AFTER})
    workerd = start_workerd(WORKER_COUNT="1", WORKER_THREADS=threads)
    jobs = engine.wait_all([*quick, killer], (JobState.COMPLETED, JobState.DEAD), timeout=45)
    assert {job.status for job in jobs.values()} == {JobState.COMPLETED}
    [kill] = journal.entries("kill")
    ended = {e["id"]: e["end"] for e in journal.entries("end") if e["pid"] == kill["pid"]}
    assert set(ended) == set(quick)  # the killed process finished these, then was killed
    # Long before the kill (with two threads one may end just after the killer started).
    assert all(kill["end"] - at >= DIE_AFTER / 2 for at in ended.values())
    # The three counted by the killed process before its death, the killer's second run by its
    # successor (flushed when it goes idle): four, none lost.
    wait_until(lambda: _completed(workerd) == 4, 10.0, "four completions counted")
