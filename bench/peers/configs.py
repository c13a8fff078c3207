"""Every configuration compared: how to start its workers and what it guarantees.

Controller side (TaskForge's .venv): this module imports no peer library. Each configuration
names the virtualenv its producer and workers run in (bench.peers.venvs), the producer module
(run as ``python -m``), and the worker processes to start for N one-job-at-a-time workers.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.peers import venvs

Argv = list[str]


@dataclass(frozen=True)
class Config:
    """One system in one configuration."""

    key: str
    label: str
    system: str  # "taskforge" or a peer's venv name (bench.peers.venvs.PINS)
    producer: str  # module run with `python -m` for enqueue / fill / warm / latency
    workers: Callable[[int], list[Argv]]  # N worker processes → commands to start
    guarantee: str
    config: str  # the settings, in words, for the configuration table
    env: dict[str, str] = field(default_factory=dict)
    gateway: bool = False  # also run the HTTP gateway; the producer POSTs /enqueue
    jobs: int | None = None  # a smaller drain size (see SLOW_JOBS)
    # TaskForge only: the checkout whose code the producer and workers run (bench.redis_cost
    # measures an older commit this way); None: this one.
    tree: Path | None = None
    threads: int = 1  # jobs one worker process runs at once (Dramatiq's -t)
    on_request: bool = False  # run only when --only names it (not in the full run)

    def concurrency(self, processes: int) -> str:
        """Describe N workers' concurrency in the results: processes × jobs at once each."""
        procs = "process" if processes == 1 else "processes"
        threads = "thread" if self.threads == 1 else "threads"
        return f"{processes} {procs} × {self.threads} {threads}"

    def enqueue_path(self) -> str:
        """Say how drain jobs are enqueued (the untimed fill whose Redis cost is reported)."""
        if self.system == "taskforge":
            return "engine direct (Scripts.enqueue_many, 1,000 a call; not the gateway)"
        return "library API (its bulk call where it has one)"

    def bin(self, name: str) -> str:
        """Return the path of an executable in this configuration's environment."""
        if self.system == "taskforge":
            return str(Path(sys.executable).parent / name)
        return str(venvs.venv_dir(self.system) / "bin" / name)


def _rq(worker_class: str | None) -> Callable[[int], list[Argv]]:
    def commands(n: int) -> list[Argv]:
        argv = ["{bin}/rq", "worker", "-u", "{url}", "--logging_level", "INFO"]
        if worker_class:
            argv += ["-w", worker_class]
        return [[*argv, "bench"] for _ in range(n)]

    return commands


def _celery(n: int) -> list[Argv]:
    app = ["{bin}/celery", "-A", "bench.peers.celery_bench", "worker", "-P", "prefork"]
    return [[*app, "-c", str(n), "-l", "INFO", "--prefetch-multiplier", "1"]]


def _dramatiq(threads: int) -> Callable[[int], list[Argv]]:
    def commands(n: int) -> list[Argv]:
        return [["{bin}/dramatiq", "bench.peers.dramatiq_bench", "-p", str(n), "-t", str(threads)]]

    return commands


def _huey(n: int) -> list[Argv]:
    return [["{bin}/huey_consumer", "bench.peers.huey_bench.huey", "-k", "process", "-w", str(n)]]


def _workerd(n: int) -> list[Argv]:
    return [["{bin}/python", "-m", "workerd"]]  # WORKER_COUNT comes from the environment


# Drain sizes of the slowest configurations. At their rates on this 2-core machine (tens to
# a few hundred jobs/s), 10,000-job drains at 1, 2 and 4 workers, three times, would take
# about 40 minutes in all; the whole run's budget is 25. A rate measured from the first job's
# start to the last job's end over thousands of jobs does not depend on the queue's length,
# so these drain fewer (the tables say how many); `bench.compare --full-size` drains 10,000.
RQ_FORK_JOBS = 500
SLOW_JOBS = 3_000
MEDIUM_JOBS = 5_000


AT_LEAST_ONCE_TF = (
    "at least once: a dead worker's job is given back at once by its supervisor, or when "
    "its lease expires"
)

CONFIGS: tuple[Config, ...] = (
    Config(
        "taskforge",
        "TaskForge",
        "taskforge",
        "bench.peers.taskforge_bench",
        _workerd,
        AT_LEAST_ONCE_TF,
        "workerd, WORKER_COUNT=N, LOG_LEVEL=INFO, handler `bench_stamp`",
    ),
    Config(
        "taskforge-http",
        "TaskForge (HTTP)",
        "taskforge",
        "bench.peers.taskforge_bench",
        _workerd,
        AT_LEAST_ONCE_TF,
        "as above, jobs sent by `POST /enqueue` to the gateway under gunicorn "
        "(deploy/gunicorn.conf.py: 2 gthread workers × 32 threads), LOG_LEVEL=INFO",
        gateway=True,
    ),
    *(
        Config(
            f"taskforge-t{n}",
            f"TaskForge ({n} thread{'s' if n > 1 else ''})",
            "taskforge",
            "bench.peers.taskforge_bench",
            _workerd,
            AT_LEAST_ONCE_TF,
            f"as TaskForge, WORKER_THREADS={n}: up to {n} jobs at once per process",
            env={"WORKER_THREADS": str(n)},
            threads=n,
            on_request=True,
        )
        for n in (1, 2, 4, 8, 10, 12, 16)
    ),
    *(
        Config(
            f"taskforge-wait{n}" if n > 1 else "taskforge-wait",
            f"TaskForge (no job held{f', {n} threads' if n > 1 else ''})",
            "taskforge",
            "bench.peers.taskforge_bench",
            _workerd,
            AT_LEAST_ONCE_TF,
            "as TaskForge, WORKER_PREFETCH=off: a worker waits for each completion's reply "
            f"before its next job{f', WORKER_THREADS={n}' if n > 1 else ''}",
            env={"WORKER_PREFETCH": "off", "WORKER_THREADS": str(n)},
            threads=n,
            on_request=True,
        )
        for n in (1, 8)
    ),
    Config(
        "taskforge-batch8",
        "TaskForge (batches of 8)",
        "taskforge",
        "bench.peers.taskforge_bench",
        _workerd,
        AT_LEAST_ONCE_TF
        + "; with WORKER_BATCH=8 a worker that dies re-runs the finished jobs of its batch "
        "not yet acknowledged (docs/WORKERD.md)",
        "as TaskForge, WORKER_BATCH=8: a worker claims up to 8 short jobs in one call and "
        "acknowledges them together in the call that claims the next batch",
        env={"WORKER_BATCH": "8"},
        on_request=True,
    ),
    Config(
        "rq-fork",
        "RQ (fork)",
        "rq",
        "bench.peers.rq_bench",
        _rq(None),
        "at most once (no `Retry` given, the default): a job whose worker dies is not re-run "
        "but moved to the FailedJobRegistry — at once when a work horse is killed, as "
        "AbandonedJobError once its StartedJobRegistry entry expires when the whole worker is",
        "N × `rq worker` (default Worker: forks a work horse per job), --logging_level INFO",
        jobs=RQ_FORK_JOBS,
    ),
    Config(
        "rq-simple",
        "RQ (no fork)",
        "rq",
        "bench.peers.rq_bench",
        _rq("rq.worker.SimpleWorker"),
        "at most once (as RQ fork)",
        "N × `rq worker -w rq.worker.SimpleWorker` (runs jobs in the worker process), "
        "--logging_level INFO",
        jobs=SLOW_JOBS,
    ),
    Config(
        "celery",
        "Celery (early ack)",
        "celery",
        "bench.peers.celery_bench",
        _celery,
        "at most once: the message is acknowledged before the task runs (Celery's default)",
        "`celery worker -P prefork -c N --prefetch-multiplier 1 -l INFO`, Redis broker, "
        "no result backend, task_acks_late=False (default)",
        jobs=MEDIUM_JOBS,
    ),
    Config(
        "celery-late",
        "Celery (acks_late)",
        "celery",
        "bench.peers.celery_bench",
        _celery,
        "at least once: acknowledged after the task; an unacknowledged message is "
        "redelivered after the broker's visibility_timeout (1 h by default)",
        "as Celery (early ack) with task_acks_late=True",
        env={"BENCH_CELERY_ACKS_LATE": "1"},
        jobs=MEDIUM_JOBS,
    ),
    Config(
        "dramatiq",
        "Dramatiq (1 thread)",
        "dramatiq",
        "bench.peers.dramatiq_bench",
        _dramatiq(1),
        "at least once: acknowledged after the actor ran; a dead worker's messages are "
        "requeued by another worker's heartbeat check",
        "`dramatiq bench.peers.dramatiq_bench -p N -t 1`, RedisBroker, default middleware",
        jobs=MEDIUM_JOBS,
    ),
    Config(
        "dramatiq-8",
        "Dramatiq (8 threads)",
        "dramatiq",
        "bench.peers.dramatiq_bench",
        _dramatiq(8),
        "at least once (as Dramatiq, 1 thread)",
        "`dramatiq … -p N -t 8` (Dramatiq's default thread count): up to 8 jobs at once per "
        "process — not one at a time",
        threads=8,
    ),
    Config(
        "dramatiq-16",
        "Dramatiq (16 threads)",
        "dramatiq",
        "bench.peers.dramatiq_bench",
        _dramatiq(16),
        "at least once (as Dramatiq, 1 thread)",
        "`dramatiq … -p N -t 16`: up to 16 jobs at once per process, beside TaskForge's "
        "16-thread I/O sitting",
        threads=16,
        on_request=True,
    ),
    Config(
        "huey",
        "Huey",
        "huey",
        "bench.peers.huey_bench",
        _huey,
        "none: a task is removed from Redis when dequeued; a killed worker loses it",
        "`huey_consumer bench.peers.huey_bench.huey -k process -w N` (RedisHuey, blocking "
        "dequeue), default log level INFO",
    ),
)


def _base_configs() -> tuple[Config, ...]:
    """With BENCH_BASE_TREE (a checkout of the commit to compare with, e.g. a `git worktree
    add --detach` of main): `taskforge-t8-base`, TaskForge (8 threads) running that tree's
    code, so a change is measured before → after in one sitting, interleaved with the rest."""
    tree = os.environ.get("BENCH_BASE_TREE")
    if not tree:
        return ()
    t8 = next(config for config in CONFIGS if config.key == "taskforge-t8")
    return (
        dataclasses.replace(
            t8,
            key="taskforge-t8-base",
            label="TaskForge (8 threads, base)",
            config=f"as TaskForge (8 threads), the code of {tree}",
            tree=Path(tree).resolve(),
        ),
    )


CONFIGS += _base_configs()
BY_KEY = {config.key: config for config in CONFIGS}
SYSTEMS = ("taskforge", "rq", "celery", "dramatiq", "huey")


def selected(only: list[str] | None) -> list[Config]:
    """Return the configurations named by --only (a system or a configuration key)."""
    if not only:
        return [c for c in CONFIGS if not c.on_request]
    unknown = set(only) - set(BY_KEY) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"--only: unknown {sorted(unknown)}; choose from {sorted(BY_KEY)}")
    return [c for c in CONFIGS if c.key in only or (c.system in only and not c.on_request)]
