"""Soak: sustained load on a real workerd; Redis memory sampled every second must stay flat.

A private redis-server, ``python -m workerd`` (N workers), and one enqueuer in this process
feeding 40-byte-payload jobs through the engine's enqueue as fast as the workers drain them
(it pauses while more than --pending-bound jobs wait, so the rate found is the highest the
workers sustain and the queue stays bounded). Once completed jobs reach their count cap
(TASK_FINISHED_MAX_JOBS, trimmed by the scheduler), memory should hold flat. At the end the
enqueuer stops, the workers drain, and every enqueued job must have completed: workerd's
completed counter equals the number enqueued, nothing failed, nothing is left in any live
state, and the newest jobs are there, completed.

``--via client`` feeds through the product's own path instead: a real gateway (gunicorn) and
the Python client (``taskforge.Client``), which names every job with its own id (a UUIDv8,
docs/API.md) and keeps no Idempotency-Key in Redis. Those jobs are kept at least
CLIENT_ID_MEMORY_MS (5 min) after they finish, whatever the cap, so the completed index holds
the cap plus what finished in the last 5 minutes, and memory is judged flat only from then on.

Run from the repository root: ``.venv/bin/python -m bench.soak --minutes 10`` (``--help``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import redis

from bench.memory import PAYLOAD
from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.job_ids import CLIENT_ID_MEMORY_MS
from shared.model.jobs import JobState, validate_enqueue
from taskforge import Client, JobSpec
from tests.support.gunicorn import run_gunicorn
from tests.support.redis_server import private_redis
from tests.support.tools import free_port, wait_until
from tests.support.workerd import Workerd, start_workerd, stop_all

RESULTS = Path(__file__).parent / "results" / "soak.json"
BATCH = 100  # jobs per enqueue transaction
SAMPLE_EVERY = 1.0  # seconds between two memory samples
DRAIN_TIMEOUT = 120.0  # seconds for the workers to finish what is queued at the end
KEEP_NEWEST = 1_000  # ids checked one by one at the end (the newest are never trimmed)
TARGET_SPREAD = 10.0  # ±% around the mean once the cap is reached
# A quick run lowers the completed cap so that it is reached within its first seconds.
QUICK_MINUTES = 2.0
QUICK_CAP = 10_000


@dataclass
class Sample:
    """One second of the run, as Redis saw it."""

    t: float  # seconds since the start
    used_memory: int
    enqueued: int
    pending: int
    completed_index: int
    load_1m: float


@dataclass
class Outcome:
    """What the run shows: rate, memory after the cap, and whether anything was lost."""

    minutes: float
    workers: int
    finished_cap: int
    enqueued: int
    jobs_per_s: float
    cap_reached_s: float | None
    memory_after_cap: dict[str, float]
    completed_index_max: int
    completed_counter: int
    failed_counter: int
    live_left: dict[str, int]
    newest_missing: int
    load_1m_mean: float
    problems: list[str] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)


@contextmanager
def running_workerd(url: str, workers: int, finished_cap: int | None) -> Iterator[Workerd]:
    """Run ``python -m workerd`` against `url` until the block ends."""
    settings = {
        "REDIS_URL": url,
        "WORKER_COUNT": str(workers),
        "PORT_WORKER": str(free_port()),
        "LOG_LEVEL": "WARNING",  # the soak measures Redis, not log volume
        "TASKFORGE_HANDLERS": "workerd.demo,bench.handlers",
        "TASK_FINISHED_MAX_JOBS": None if finished_cap is None else str(finished_cap),
    }
    with tempfile.TemporaryDirectory(prefix="taskforge-soak-") as tmp:
        supervisor = start_workerd(settings, Path(os.devnull), Path(tmp) / "workerd.err")
        try:
            yield supervisor
        finally:
            stop_all([supervisor])


def counter(workerd: Workerd, name: str) -> int:
    """Return a Prometheus counter of workerd's /metrics, summed over its labels."""
    status, _, body = workerd.http("/metrics")
    if status != 200:
        raise RuntimeError(f"/metrics answered {status}")
    total = 0.0
    for line in body.decode().splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


class Enqueuer:
    """Feeds jobs as fast as they drain: a batch whenever fewer than `bound` wait."""

    def __init__(self, scripts: Scripts, bound: int) -> None:
        self.scripts = scripts
        self.bound = bound
        self.request = validate_enqueue({"type": "soak", "payload": PAYLOAD})
        self.enqueued = 0
        self.newest: deque[str] = deque(maxlen=KEEP_NEWEST)

    def step(self) -> int:
        """Enqueue one batch if the queue has room; return the number of jobs pending."""
        pending = self.scripts.redis.zcard(self.scripts.keys.pending)
        if pending >= self.bound:
            return pending
        ids = [str(uuid.uuid4()) for _ in range(BATCH)]
        self.scripts.enqueue_many([(self.request, job_id) for job_id in ids])
        self.enqueued += BATCH
        self.newest.extend(ids)
        return pending + BATCH


class ClientEnqueuer(Enqueuer):
    """Feeds jobs through a gateway with the Python client (its own ids, no Idempotency-Key):
    `batch` jobs per POST /enqueue/batch, or one POST /enqueue each when `batch` is 1."""

    def __init__(self, scripts: Scripts, bound: int, client: Client, batch: int) -> None:
        super().__init__(scripts, bound)
        self.client = client
        self.batch = batch

    def step(self) -> int:
        pending = self.scripts.redis.zcard(self.scripts.keys.pending)
        if pending >= self.bound:
            return pending
        if self.batch == 1:
            ids = [self.client.enqueue("soak", PAYLOAD).id]
        else:
            jobs = self.client.enqueue_many([JobSpec("soak", PAYLOAD)] * self.batch)
            ids = [job.id for job in jobs]
        self.enqueued += len(ids)
        self.newest.extend(ids)
        return pending + len(ids)


@contextmanager
def gateway(url: str) -> Iterator[str]:
    """Run the gateway under gunicorn (deploy/gunicorn.conf.py) on `url`; yield its URL."""
    with (
        tempfile.TemporaryDirectory(prefix="taskforge-soak-gateway-") as tmp,
        run_gunicorn(url, Path(tmp), log_path=Path(os.devnull), LOG_LEVEL="WARNING") as server,
    ):
        yield server.url


def feed(client: redis.Redis, enqueuer: Enqueuer, seconds: float) -> list[Sample]:
    """Enqueue for `seconds`, sampling Redis memory every second; return the samples."""
    keys = enqueuer.scripts.keys
    samples: list[Sample] = []
    started = time.monotonic()
    next_sample = started
    while (now := time.monotonic()) < started + seconds:
        pending = enqueuer.step()
        if pending >= enqueuer.bound:
            time.sleep(0.002)  # a throttle, not a wait for an event: the workers set the pace
        if now >= next_sample:
            next_sample += SAMPLE_EVERY
            samples.append(
                Sample(
                    t=round(now - started, 3),
                    used_memory=int(client.info("memory")["used_memory"]),
                    enqueued=enqueuer.enqueued,
                    pending=pending,
                    completed_index=client.zcard(keys.completed),
                    load_1m=os.getloadavg()[0],
                )
            )
    return samples


def spread(values: list[int]) -> dict[str, float]:
    """Return min, max, mean and the largest deviation from the mean in ± %."""
    if not values:
        return {}
    mean = statistics.fmean(values)
    deviation = max(max(values) - mean, mean - min(values))
    return {
        "min": min(values),
        "max": max(values),
        "mean": mean,
        "spread_pct": 100 * deviation / mean,
    }


def live_counts(client: redis.Redis, keys: Keys) -> dict[str, int]:
    """Return how many jobs are in each state other than completed."""
    states = [s for s in JobState if s is not JobState.COMPLETED]
    return {str(s): client.zcard(keys.state_index(s)) for s in states}


def soak(
    minutes: float, workers: int, finished_cap: int | None, bound: int, via: str, batch: int
) -> Outcome:
    """Run the soak on a fresh private redis-server; return its outcome."""
    cap = finished_cap if finished_cap is not None else Policy().finished_max_jobs
    keys = Keys()
    with private_redis() as server, contextlib.ExitStack() as stack:
        client = server.client()
        scripts = Scripts(client, keys)
        scripts.load()
        if via == "client":
            url = stack.enter_context(gateway(server.url))
            producer = stack.enter_context(Client(url, ""))
            enqueuer: Enqueuer = ClientEnqueuer(scripts, bound, producer, batch)
        else:
            enqueuer = Enqueuer(scripts, bound)
        with running_workerd(server.url, workers, finished_cap) as workerd:
            started = time.monotonic()
            samples = feed(client, enqueuer, minutes * 60)
            fed_for = time.monotonic() - started

            def drained() -> bool:
                return counter(workerd, "taskforge_jobs_completed_total") >= enqueuer.enqueued

            wait_until(drained, DRAIN_TIMEOUT, "the workers to finish every job", 0.2)
            completed = counter(workerd, "taskforge_jobs_completed_total")
            failed = counter(workerd, "taskforge_jobs_failed_total")
        pipe = client.pipeline(transaction=False)
        for job_id in enqueuer.newest:
            pipe.hget(keys.job(job_id), "status")
        missing = sum(status != b"completed" for status in pipe.execute())
        live = live_counts(client, keys)
        client.close()
    kept_s = CLIENT_ID_MEMORY_MS / 1000 if via == "client" else 0.0
    return judge(
        minutes,
        workers,
        cap,
        enqueuer.enqueued,
        fed_for,
        samples,
        completed,
        failed,
        live,
        missing,
        kept_s,
    )


def judge(
    minutes: float,
    workers: int,
    cap: int,
    enqueued: int,
    fed_for: float,
    samples: list[Sample],
    completed: int,
    failed: int,
    live: dict[str, int],
    missing: int,
    kept_s: float = 0.0,
) -> Outcome:
    """Turn the raw figures into the outcome, naming every problem.

    `kept_s`: how long finished jobs are kept whatever the cap (a client's ids: their memory);
    memory is judged from when the cap is reached and that long has passed.
    """
    reached = next(
        (s.t for s in samples if s.completed_index >= cap and s.t >= kept_s + 2 * SAMPLE_EVERY),
        None,
    )
    after = [s for s in samples if reached is not None and s.t >= reached]
    index_max = max((s.completed_index for s in after), default=0)
    outcome = Outcome(
        minutes=minutes,
        workers=workers,
        finished_cap=cap,
        enqueued=enqueued,
        jobs_per_s=enqueued / fed_for,
        cap_reached_s=reached,
        memory_after_cap=spread([s.used_memory for s in after]),
        completed_index_max=index_max,
        completed_counter=completed,
        failed_counter=failed,
        live_left=live,
        newest_missing=missing,
        load_1m_mean=statistics.fmean(s.load_1m for s in samples) if samples else 0.0,
        samples=samples,
    )
    problems = outcome.problems
    if completed != enqueued:
        problems.append(f"{enqueued} enqueued but {completed} completed")
    if failed or any(live.values()):
        problems.append(f"{failed} failed; left in live states: {live}")
    if missing:
        problems.append(f"{missing} of the newest {KEEP_NEWEST} jobs are not completed")
    if reached is None:
        problems.append(f"the completed index never reached its cap of {cap}")
    # Trim runs once a second: the index may exceed the cap by what one second completes.
    elif index_max > cap + (kept_s + 2) * outcome.jobs_per_s:
        problems.append(f"the completed index grew to {index_max}, past its cap of {cap}")
    return outcome


def report(outcome: Outcome) -> str:
    """Return the human summary of a run."""
    memory = outcome.memory_after_cap
    lines = [
        f"{outcome.minutes:g} min, {outcome.workers} workers, completed cap "
        f"{outcome.finished_cap:,}, mean 1-min load {outcome.load_1m_mean:.1f}",
        f"rate: {outcome.jobs_per_s:,.0f} jobs/s ({outcome.enqueued:,} enqueued, "
        f"{outcome.completed_counter:,} completed, {outcome.failed_counter} failed)",
    ]
    if outcome.cap_reached_s is None:
        lines.append("cap never reached")
    else:
        lines.append(
            f"cap reached after {outcome.cap_reached_s:.0f} s; used_memory since: "
            f"min {memory['min'] / 1e6:.1f} MB, max {memory['max'] / 1e6:.1f} MB, "
            f"mean {memory['mean'] / 1e6:.1f} MB, spread ±{memory['spread_pct']:.1f} % "
            f"(target ±{TARGET_SPREAD:g} %); completed index at most "
            f"{outcome.completed_index_max:,}"
        )
    lines.append(
        "nothing lost" if not outcome.problems else "PROBLEMS: " + "; ".join(outcome.problems)
    )
    return "\n".join(lines)


def main() -> None:
    """Run the soak, print the summary, write the JSON; exit 1 when something was lost."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="0.5 for a quick check")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--finished-cap",
        type=int,
        help="TASK_FINISHED_MAX_JOBS for workerd (default: its own, 100,000; "
        f"{QUICK_CAP:,} for a run under {QUICK_MINUTES:g} minutes, so the cap is reached)",
    )
    parser.add_argument("--pending-bound", type=int, default=2_000, help="most jobs waiting")
    parser.add_argument(
        "--via",
        choices=("engine", "client"),
        default="engine",
        help="engine: the engine's enqueue in this process (default); client: the Python "
        "client through a real gateway, with its own job ids",
    )
    parser.add_argument(
        "--batch", type=int, default=BATCH, help="--via client: jobs per request (1: enqueue)"
    )
    parser.add_argument("--json", type=Path, default=RESULTS, help=f"default {RESULTS}")
    args = parser.parse_args()
    cap = args.finished_cap
    if cap is None and args.minutes < QUICK_MINUTES:
        cap = QUICK_CAP
    outcome = soak(args.minutes, args.workers, cap, args.pending_bound, args.via, args.batch)
    args.json.write_text(json.dumps(asdict(outcome), indent=1) + "\n")
    print(report(outcome))
    if outcome.problems:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
