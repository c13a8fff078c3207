"""The worker's own CPU per job: µs of user + system time per trivial job, and the drain rate.

Runs the real supervisor (``python -m workerd``, LOG_LEVEL INFO, the observability port on,
stdout to a file) of each checkout given with ``--tree`` against one private redis-server, in
interleaved rounds. Per round and tree: N ``demo.noop`` jobs wait in a paused queue while
workerd starts (start-up stays out of the window), the worker processes' CPU is read
(/proc/<pid>/stat), the queue is resumed, and once the last job completed the CPU is read
again: (after − before) ÷ N is the worker CPU per job. The drain rate is N ÷ (last finish −
first start), as Redis recorded them (bench.workers' method).

``--profile FILE`` also samples the first worker with py-spy during the first tree's drains
(``pip install py-spy``) and prints the frames that cost the most per job.

    .venv/bin/python -m bench.job_cpu --tree /tmp/jobcpu-before --tree . --workers 1 2
    .venv/bin/python -m bench.job_cpu --env WORKER_BATCH=8 --workers 1 4

``--env KEY=VALUE`` sets a workerd setting for every tree (the environment's own are scrubbed).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis

from bench.workers import run_rate
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import validate_enqueue
from shared.model.queues import DEFAULT_QUEUE
from tests.support.redis_server import private_redis
from tests.support.tools import cpu_seconds, free_port, wait_until
from tests.support.workerd import scrubbed_environment

ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT = 30.0
DRAIN_TIMEOUT = 300.0
STOP_TIMEOUT = 30.0
POLL = 0.05


class Host:
    """One ``python -m workerd`` of a tree, its stdout in a file."""

    def __init__(
        self, tree: Path, url: str, workers: int, log: Path, extra: dict[str, str] | None = None
    ) -> None:
        self.port = free_port()
        self.log = log
        env = scrubbed_environment()
        env.update(
            {
                "REDIS_URL": url,
                "WORKER_COUNT": str(workers),
                "PORT_WORKER": str(self.port),
                "LOG_LEVEL": "INFO",
                "TASKFORGE_HANDLERS": "workerd.demo,bench.handlers",
                "PYTHONPATH": str(tree),
                # --env: settings scrubbed_environment drops (WORKER_BATCH=8, ...), on purpose.
                **(extra or {}),
            }
        )
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "workerd"],
                cwd=tree,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.workers = workers

    def ready(self) -> bool:
        """Tell whether /ready answers 200 and every worker logged its start."""
        if self.proc.poll() is not None:
            raise RuntimeError(f"workerd exited: {self.log.read_text()[-2000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
            conn.request("GET", "/ready")
            status = conn.getresponse().status
            conn.close()
        except OSError:
            return False
        return status == 200 and len(self.worker_pids()) == self.workers

    def worker_pids(self) -> list[int]:
        """Return the worker processes' pids, from the supervisor's log (read before the jobs)."""
        pids = []
        started = set()
        for line in self.log.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("event") == "child_spawned" and record.get("kind") == "worker":
                pids.append(record["child_pid"])
            if record.get("event") == "worker_started":
                started.add(record["pid"])
        return [pid for pid in pids if pid in started]

    def stop(self) -> None:
        """SIGTERM the supervisor and wait for it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT)


def drain(
    tree: Path,
    url: str,
    jobs: int,
    workers: int,
    profile: Path | None,
    extra: dict[str, str] | None = None,
) -> dict[str, float]:
    """Drain `jobs` demo.noop jobs with `workers` workers of `tree`; return CPU (the workers',
    the supervisor's and Redis's, µs per job) and rate. `extra`: more workerd settings."""
    client = redis.Redis.from_url(url)
    client.flushall()
    scripts = Scripts(client)
    scripts.pause_queue(DEFAULT_QUEUE)
    request = validate_enqueue({"type": "demo.noop"})
    ids = [str(uuid.uuid4()) for _ in range(jobs)]
    for start in range(0, jobs, 1000):
        scripts.enqueue_many([(request, job_id) for job_id in ids[start : start + 1000]])
    with tempfile.TemporaryDirectory(prefix="taskforge-bench-jobcpu-") as tmp:
        host = Host(tree, url, workers, Path(tmp) / "workerd.log", extra)
        try:
            wait_until(host.ready, READY_TIMEOUT, "workerd to be ready", POLL)
            pids = host.worker_pids()
            spy = _py_spy(pids[0], profile) if profile is not None else None
            others = [pid for pid in _process_tree(host.proc.pid) if pid not in pids]
            before = sum(cpu_seconds(pid) for pid in pids)
            others_before = sum(cpu_seconds(pid) for pid in others)
            redis_before = _redis_cpu(client)
            scripts.resume_queue(DEFAULT_QUEUE)
            done = lambda: client.zcard(Keys().completed) == jobs  # noqa: E731
            wait_until(done, DRAIN_TIMEOUT, "the drain", POLL)
            after = sum(cpu_seconds(pid) for pid in pids)
            others_after = sum(cpu_seconds(pid) for pid in others)
            redis_after = _redis_cpu(client)
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(timeout=60)
        finally:
            host.stop()
    return {
        "worker_cpu_us_per_job": (after - before) * 1e6 / jobs,
        # The supervisor, scheduler and observability server: what a job costs beside its worker.
        "others_cpu_us_per_job": (others_after - others_before) * 1e6 / jobs,
        "redis_cpu_us_per_job": (redis_after - redis_before) * 1e6 / jobs,
        "jobs_per_s": run_rate(client, ids),
    }


def _process_tree(pid: int) -> list[int]:
    """Return `pid` and all its descendants (Linux /proc/<pid>/task/*/children)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            with contextlib.suppress(OSError):
                todo.extend(int(child) for child in (task / "children").read_text().split())
    return found


def _redis_cpu(client: redis.Redis) -> float:
    """Return the CPU seconds Redis's main process has used (INFO cpu)."""
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def _py_spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """Start py-spy sampling `pid` into `out` (collapsed stacks, appended across drains)."""
    spy = Path(sys.executable).parent / "py-spy"
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_suffix(f".{pid}.txt")
    argv = [str(spy), "record", "-p", str(pid), "--rate", "400", "--nonblocking"]
    proc = subprocess.Popen(
        [*argv, "--format", "raw", "-o", str(part)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # py-spy attaches before the drain starts (its first samples are idle)
    return proc


def frame_name(raw: str) -> str:
    """Return "function (file.py)" of a py-spy frame "function (path/to/file.py:line)"."""
    name, _, where = raw.partition(" (")
    return f"{name} ({Path(where.rsplit(':', 1)[0]).name})" if where else raw


def top_frames(
    stacks: str, limit: int = 10, under: str = "WorkerProcess.step"
) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """Return the `limit` costliest functions of collapsed `stacks` (py-spy's raw format) among
    the samples that pass through `under`: by own time (% of those samples), and by time under
    them (the frames every such sample passes through, the loop's own callers, left out)."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in stacks.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [frame_name(raw) for raw in stack.split(";")]
        if not count.isdigit() or not any(frame.startswith(under) for frame in frames):
            continue
        total += int(count)
        own[frames[-1]] += int(count)
        for frame in set(frames):
            inclusive[frame] += int(count)
    if not total:
        return [], []
    below = [(f, 100 * n / total) for f, n in inclusive.most_common() if n < total]
    return [(f, 100 * n / total) for f, n in own.most_common(limit)], below[:limit]


def main() -> None:
    """Measure every tree in interleaved rounds; print medians (min–max)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, action="append", help="default: this checkout")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", type=Path, help="py-spy the first tree's first worker")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a workerd setting for every tree (WORKER_BATCH=8); repeatable",
    )
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.env)
    trees = [tree.resolve() for tree in (args.tree or [ROOT])]
    results: dict[str, dict[int, list[dict[str, float]]]] = {
        str(t): {k: [] for k in args.workers} for t in trees
    }
    with private_redis() as server:
        for round_no in range(args.rounds):
            for workers in args.workers:
                for index, tree in enumerate(trees):
                    profile = args.profile if index == 0 else None
                    run = drain(tree, server.url, args.jobs, workers, profile, extra)
                    run["load_average"] = os.getloadavg()[0]
                    results[str(tree)][workers].append(run)
                    print(
                        f"round {round_no + 1}, {workers} worker(s), {tree}: {run}", file=sys.stderr
                    )
    for workers in args.workers:
        print(f"\n{args.jobs:,} demo.noop jobs, {workers} worker(s), {args.rounds} rounds")
        for tree in trees:
            runs = results[str(tree)][workers]
            cpu = [r["worker_cpu_us_per_job"] for r in runs]
            others = [r["others_cpu_us_per_job"] for r in runs]
            server = [r["redis_cpu_us_per_job"] for r in runs]
            rate = [r["jobs_per_s"] for r in runs]
            print(
                f"  {tree}: worker CPU {_median_range(cpu)} µs/job, supervisor + scheduler + "
                f"observability {_median_range(others)}, Redis {_median_range(server)}, "
                f"drain {_median_range(rate)} jobs/s"
            )
    if args.profile is not None:
        parts = args.profile.parent.glob(args.profile.stem + ".*.txt")
        stacks = "".join(part.read_text() for part in parts)
        args.profile.write_text(stacks)
        own, under = top_frames(stacks, 15)
        print(f"\nprofile of {trees[0]} (py-spy, first worker), % of its samples in a job:")
        print("  own time:")
        for frame, share in own:
            print(f"    {share:5.1f}  {frame}")
        print("  time under:")
        for frame, share in under:
            print(f"    {share:5.1f}  {frame}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


def _median_range(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:,.0f}"
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}–{max(values):,.0f})"


if __name__ == "__main__":
    main()
