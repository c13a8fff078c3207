"""A master of the cluster killed under load: how long its queue stalls, what is lost or repeated.

A real six-node cluster on loopback (tests.support.cluster), a gunicorn gateway and a workerd
serving three queues placed on three different masters. Three producers enqueue journaled jobs
over HTTP, one per queue, each with an Idempotency-Key; after WARMUP seconds the master that
owns the first queue is killed with SIGKILL; its replica is promoted (cluster-node-timeout 2 s
here, 15 s by default); the load goes on for AFTER seconds, then every acknowledged job is
followed to its end. Figures:

- enqueues resumed: from the kill to the first acknowledged enqueue on the killed queue after
  its first refusal (the gateway answers 503 meanwhile);
- completions resumed: from the kill to the first completion on the killed queue after it;
- the other queues' longest pause between two completions around the kill (do they stall?);
- acknowledged jobs lost (GET answers 404: replication is asynchronous), and duplicates (a job
  whose handler ran to its end more than once, from the journal written outside Redis).

Durable mode (``wait_replicas``, TASKFORGE_WAIT_REPLICAS=1): an enqueue is acknowledged only once
the replica of its slot's master has it. The promoted replica then has no replica of its own
and could confirm nothing, so the killed node is started again once the promotion is seen: it
rejoins as the new master's replica (its nodes.conf names the cluster), and the killed queue's
enqueues resume after that. With ``replica_behind`` seconds, the killed master's replica is cut
off that long before the kill (frozen, its link dropped by the master), as a lagging replica
would be: without durable mode what the master acknowledged meanwhile is lost.

    .venv/bin/python -m bench.cluster_failover                      # about a minute
    .venv/bin/python -m bench.cluster_failover --wait-replicas --replica-behind 0.5
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.faults.http_load import QueueLoad
from tests.support.cluster import RedisCluster, queue_names_on_distinct_masters, running_cluster
from tests.support.gunicorn import Gunicorn, run_gunicorn
from tests.support.tools import free_port, wait_until
from tests.support.workerd import start_workerd, stop_all

WARMUP = 3.0  # seconds of load before the kill
AFTER = 12.0  # seconds of load after the kill
PACE = 0.01  # seconds between one producer's enqueues: about 100 jobs/s per queue at most
SETTLE = 60.0  # seconds for every acknowledged job to finish after the load stops
HTTP_TIMEOUT = 5.0


@dataclass
class Figures:
    """What the scenario measured (seconds, counts)."""

    killed_queue: str
    failover_s: float  # kill to promotion seen by the harness
    enqueues_resumed_s: float | None
    completions_resumed_s: float | None
    other_queues_longest_pause_s: float
    acked: int
    lost: int
    lost_ids: list[str]
    lost_acked_before_kill_s: float  # how long before the kill the earliest lost job was acked
    duplicates: int
    refused: int
    others_refused: int  # enqueues to the other queues refused after the kill
    other_lookups: dict[int, int]  # status -> count of GETs of other queues' jobs, master down
    wait_replicas: bool = False
    replica_behind_s: float = 0.0
    acked_while_behind: int = 0  # enqueues to the killed queue answered 2xx between cut and kill
    rejoined_s: float | None = None  # kill to the killed node back as the new master's replica

    def lines(self) -> list[str]:
        def sec(value: float | None) -> str:
            return "never" if value is None else f"{value:.2f} s"

        return [
            f"killed the master of queue {self.killed_queue}; promotion seen after "
            f"{self.failover_s:.2f} s",
            f"enqueues to it resumed after {sec(self.enqueues_resumed_s)} "
            f"({self.refused} enqueues refused meanwhile; {self.others_refused} to the other "
            "queues)",
            f"completions in it resumed after {sec(self.completions_resumed_s)}",
            f"GET /jobs/<id> of the other queues' jobs, master down: {self.other_lookups}",
            f"the other queues' longest pause between completions: "
            f"{self.other_queues_longest_pause_s:.2f} s",
            f"acknowledged jobs: {self.acked}, lost: {self.lost} (acknowledged up to "
            f"{self.lost_acked_before_kill_s:.2f} s before the kill), "
            f"duplicates: {self.duplicates}",
            f"durable mode: {'on' if self.wait_replicas else 'off'}; replica cut off "
            f"{self.replica_behind_s:g} s before the kill ({self.acked_while_behind} enqueues "
            f"acknowledged meanwhile); the killed node rejoined after {sec(self.rejoined_s)}",
        ]


def _job(gateway: Gunicorn, job_id: str) -> dict[str, Any] | None:
    status, _, doc = gateway.request("GET", f"/jobs/{job_id}")
    return doc if status == 200 else None


def run(
    cluster: RedisCluster, tmp: Path, *, wait_replicas: bool = False, replica_behind: float = 0.0
) -> Figures:
    """Run the scenario on `cluster` (its first queue's master is killed); return the figures.

    `wait_replicas`: durable mode on in the gateway and workerd; `replica_behind`: seconds the
    killed master's replica is cut off before the kill (0: as up to date as it gets)."""
    queues = queue_names_on_distinct_masters(cluster)
    url = f"redis+cluster://{cluster.seeds}"
    journal = tmp / "journal.jsonl"
    settings = {
        "REDIS_URL": url,
        "PORT_WORKER": str(free_port()),
        "TASKFORGE_HANDLERS": "tests.faults.handlers_for_faults",
        "WORKER_QUEUES": ",".join(queues),
        "WORKER_COUNT": "3",
        "TASK_VISIBILITY_TIMEOUT": "5s",
        "TASKFORGE_BIND_HOST": "127.0.0.1",
    }
    durable = {"TASKFORGE_WAIT_REPLICAS": "1"} if wait_replicas else {}
    supervisor = start_workerd({**settings, **durable}, tmp / "workerd.log", tmp / "workerd.err")
    try:
        with run_gunicorn(url, tmp, **durable) as gateway:
            figures = _scenario(cluster, gateway, queues, journal, wait_replicas, replica_behind)
            figures.wait_replicas = wait_replicas
            return figures
    finally:
        stop_all([supervisor])


def _scenario(
    cluster: RedisCluster,
    gateway: Gunicorn,
    queues: list[str],
    journal: Path,
    wait_replicas: bool,
    replica_behind: float,
) -> Figures:
    # Every enqueue carries a fresh Idempotency-Key; times are wall clock, as the jobs' are.
    loads = [
        QueueLoad(
            gateway, journal, q, pace=PACE, job_sleep=0.0, http_timeout=HTTP_TIMEOUT, keyed=True
        )
        for q in queues
    ]
    for load in loads:
        load.thread.start()
    try:
        threading.Event().wait(WARMUP)  # load before the kill
        master = cluster.master_of(f"{{taskforge:{queues[0]}}}")
        replica = cluster.cut_off_replica(master) if replica_behind else cluster.replica_of(master)
        cut = time.time()  # an answer read after it may still be of a WAIT just before
        if replica_behind:
            wait_until(  # the fault's duration, not a synchronisation
                lambda: time.time() - cut >= replica_behind,
                replica_behind + 1,
                "the replica to fall behind",
            )
        kill = time.time()
        master.kill()
        replica.thaw()
        # Reads by id of the other queues' jobs while the master is down (GET /jobs/<id> tries
        # every queue: it must find them on the masters that answer).
        others = [job_id for load in loads[1:] for _, _, job_id in load.acked[-5:]]
        lookups = Counter(gateway.request("GET", f"/jobs/{job_id}")[0] for job_id in others)
        cluster.wait_promoted(replica)
        failover = time.time() - kill
        rejoined = None
        if wait_replicas:
            # The promoted master has no replica: with durable mode it confirms nothing until
            # the killed node is back as its replica (production runs two replicas a master).
            cluster.rejoin(master)
            rejoined = time.time() - kill
        threading.Event().wait(max(0.0, AFTER - (time.time() - kill)))  # load after the kill
    finally:
        for load in loads:
            load.stop.set()
        for load in loads:
            load.thread.join(timeout=HTTP_TIMEOUT + 5)
    acked = {job_id: load.queue for load in loads for _, _, job_id in load.acked}

    def settled() -> dict[str, dict[str, Any] | None] | None:
        jobs = {job_id: _job(gateway, job_id) for job_id in acked}
        pending = [j for j in jobs.values() if j is not None and j["status"] != "completed"]
        return None if pending else jobs

    jobs = wait_until(settled, SETTLE, "every acknowledged job to finish", interval=0.5)
    runs = Counter(json.loads(line)["id"] for line in journal.read_text().splitlines())
    lost = sorted(job_id for job_id, job in jobs.items() if job is None)
    killed = loads[0]
    first_refusal = min((sent for sent, _ in killed.refused if sent >= kill), default=None)
    resumed = (  # the answer to the first enqueue sent after the first refused one
        killed.first_ack_sent_after(first_refusal) if first_refusal is not None else None
    )
    finished = {
        queue: sorted(
            _ms(job["finished_at"])
            for job_id, job in jobs.items()
            if job is not None and acked[job_id] == queue
        )
        for queue in queues
    }
    # A completion the dead master wrote an instant before it died may carry a time just
    # past the kill: count from the first refused enqueue (the master was surely gone then).
    gone_wall = first_refusal or kill
    after_kill = [t for t in finished[queues[0]] if t > gone_wall * 1000]
    return Figures(
        killed_queue=queues[0],
        failover_s=failover,
        enqueues_resumed_s=None if resumed is None else resumed - kill,
        completions_resumed_s=(after_kill[0] / 1000 - kill) if after_kill else None,
        other_queues_longest_pause_s=max(
            _longest_pause(finished[q], kill * 1000) for q in queues[1:]
        ),
        acked=len(acked),
        lost=len(lost),
        lost_ids=lost,
        lost_acked_before_kill_s=max(
            (kill - t for load in loads for _, t, job_id in load.acked if job_id in set(lost)),
            default=0.0,
        ),
        duplicates=sum(1 for count in runs.values() if count > 1),
        refused=killed.refused_sent_after(kill),
        others_refused=sum(load.refused_sent_after(kill) for load in loads[1:]),
        other_lookups=dict(lookups),
        replica_behind_s=replica_behind,
        acked_while_behind=killed.acked_between(cut, kill),
        rejoined_s=rejoined,
    )


def _ms(text: str) -> float:
    """Return epoch milliseconds of an RFC 3339 time as the API writes it."""
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000


def _longest_pause(times_ms: list[float], around_ms: float) -> float:
    """Return the longest gap (s) between consecutive completions within 10 s of `around_ms`."""
    near = [t for t in times_ms if abs(t - around_ms) < 10_000]
    gaps = [b - a for a, b in itertools.pairwise(near)]
    return max(gaps, default=0.0) / 1000


@contextlib.contextmanager
def _cluster() -> Iterator[RedisCluster]:
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        raise SystemExit("redis-server and redis-cli must be on PATH (bin/test installs them)")
    with running_cluster(server, cli) as cluster:
        yield cluster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wait-replicas", action="store_true", help="durable mode on")
    parser.add_argument("--replica-behind", type=float, default=0.0, metavar="SECONDS")
    options = parser.parse_args()
    with _cluster() as cluster, tempfile.TemporaryDirectory(prefix="tf-failover-") as tmp:
        figures = run(
            cluster,
            Path(tmp),
            wait_replicas=options.wait_replicas,
            replica_behind=options.replica_behind,
        )
    for line in figures.lines():
        print(line)


if __name__ == "__main__":
    main()
