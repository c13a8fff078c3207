"""Where a job thread's cycle goes in an I/O-bound drain: the job body against the gap between
two jobs, per thread, and the CPU each process spent per job.

bench.compare gives one rate per drain; this takes the same drain apart (the same harness,
configurations and stamp records, bench/peers/harness.py). Each thread's records, in order,
give its **body** (the task body's start to its end: the round trip, the wait, and any time
the thread waited for the GIL or a CPU after them) and its **gap** (one job's end to the next
one's start: for TaskForge, recording the outcome, complete.lua claiming the next job, and
starting it; for Dramatiq, its ack handed to the consumer thread and the next message taken
from the prefetch). Ideal cycle: the wait; threads ÷ cycle is the rate. CPU per job: each
process's user + system time (/proc) over the middle of the drain, divided by the jobs run
in it; Redis's too. Context switches per job: the worker processes' threads' voluntary ones
(each time a thread blocked: a system call, a lock, the GIL) and preempted ones, from
/proc/<pid>/task/*/status over the same window.

    .venv/bin/python -m bench.io_cycle --only taskforge-t8 dramatiq-8 --rounds 3
    .venv/bin/python -m bench.io_cycle --only taskforge-t8 --rounds 1 --jobs 30000 \
        --profile /tmp/cycle.txt    # py-spy one worker process mid-drain

Configurations run one after another in each round (interleaved, every other round in reverse
order). ``BENCH_BASE_TREE`` adds
``taskforge-t8-base`` (bench/peers/configs.py) to compare a change with its base.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from bench.peers import configs, harness
from tests.support import tools
from tests.support.redis_server import private_redis
from tests.support.stats import percentile

TIMEOUT = 300.0


def cpu_seconds(pid: int) -> float:
    """Return a process's user + system CPU seconds, its reaped children's left out (0 once
    it is gone)."""
    try:
        return tools.cpu_seconds(pid)
    except OSError:
        return 0.0


def switches(pid: int) -> tuple[int, int]:
    """Return a process's voluntary and involuntary context switches, all its threads summed
    (0, 0 once it is gone). A thread that blocks (a syscall, a lock, the GIL) switches
    voluntarily; one the kernel preempts, involuntarily: per job, a count of hand-offs that the
    machine's load changes far less than it changes CPU time."""
    voluntary = involuntary = 0
    try:
        for task in os.scandir(f"/proc/{pid}/task"):
            for line in Path(task.path, "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    voluntary += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches:"):
                    involuntary += int(line.split()[1])
    except OSError:
        pass
    return voluntary, involuntary


def tree_pids(leaders: list[int]) -> list[int]:
    """Return the leaders and all their descendants (bench.peers.pss walks the same tree)."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                ppid = int(Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(leaders)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return sorted(found)


def profile_one_worker(pids: list[int], out: Path, seconds: int) -> subprocess.Popen[bytes]:
    """Start py-spy on the process of `pids` with the most threads (a worker process of job
    threads): wall-clock samples of every thread, idle ones included, as raw stacks."""
    threads = {pid: len(os.listdir(f"/proc/{pid}/task")) for pid in pids}
    worker = max(threads, key=threads.__getitem__)
    if threads[worker] < 3:
        raise RuntimeError("--profile: no worker process with job threads in the tree")
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    argv = [spy, "record", "-d", str(seconds), "-r", "250", "--idle", "--threads", "-f", "raw"]
    return subprocess.Popen(
        [*argv, "-o", str(out), "-p", str(worker)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def one_drain(
    config: configs.Config,
    jobs: int,
    workers: int,
    wait_ms: float,
    profile: Path | None = None,
    profile_seconds: int = 6,
) -> dict:
    """Drain `jobs` I/O jobs; return the rate, body and gap (ms) and CPU ms per job. With
    `profile`, py-spy one worker process from the drain's first eighth for `profile_seconds`."""
    ws = harness.Workspace(config)
    try:
        with private_redis() as server:
            stamps = ws.stamps()
            env = harness.base_env(config, server.url, stamps, wait_ms)
            env.update(config.env)  # last: a --variant's LOG_LEVEL over the harness's INFO
            harness.produce(config, env, "enqueue", "fill", str(jobs))
            assert server.process is not None
            with harness.running(config, server.url, env, workers, ws.log) as group:
                # The middle of the drain: past start-up, before the last jobs.
                harness.wait_stamps(stamps, jobs // 8, TIMEOUT, group, "start")
                pids = tree_pids([proc.pid for proc in group.procs])
                before = {pid: cpu_seconds(pid) for pid in [*pids, server.process.pid]}
                switched_before = {pid: switches(pid) for pid in pids}
                ran_before = harness.stamp_count(stamps)
                spy = profile_one_worker(pids, profile, profile_seconds) if profile else None
                harness.wait_stamps(stamps, jobs - jobs // 8, TIMEOUT, group, "middle")
                if spy is not None and spy.wait(timeout=profile_seconds + 30) != 0:
                    raise RuntimeError(f"py-spy exited with {spy.returncode}")
                after = {pid: cpu_seconds(pid) for pid in before}
                switched = [
                    (now[0] - was[0], now[1] - was[1])
                    for pid, was in switched_before.items()
                    for now in [switches(pid)]
                ]
                ran = harness.stamp_count(stamps) - ran_before
                harness.wait_stamps(stamps, jobs, TIMEOUT, group, "drain")
        per_thread: dict[str, list[tuple[float, float]]] = {}
        for entry in os.scandir(stamps):
            rows = [line.split() for line in Path(entry.path).read_text().splitlines()]
            per_thread[entry.name] = sorted((float(r[1]), float(r[2])) for r in rows)
    finally:
        ws.close()
    spans = [span for rows in per_thread.values() for span in rows]
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    bodies = [(end - start) * 1000 for start, end in spans]
    gaps = [
        (rows[i + 1][0] - rows[i][1]) * 1000
        for rows in per_thread.values()
        for i in range(len(rows) - 1)
    ]
    redis_pid = next(pid for pid in before if pid not in pids)
    return {
        "jobs_per_s": jobs / (last - first),
        "threads": len(per_thread),
        "body_mean": statistics.mean(bodies),
        "body_p50": percentile(bodies, 0.5),
        "gap_mean": statistics.mean(gaps),
        "gap_p50": percentile(gaps, 0.5),
        "gap_p90": percentile(gaps, 0.9),
        "cpu_ms_per_job": sum(after[p] - before[p] for p in pids) * 1000 / ran,
        "redis_cpu_ms_per_job": (after[redis_pid] - before[redis_pid]) * 1000 / ran,
        "switches_per_job": sum(v for v, _ in switched) / ran,
        "preempted_per_job": sum(i for _, i in switched) / ran,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", default=["taskforge-t8", "dramatiq-8"])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--io-wait-ms", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="FILE",
        help="py-spy one worker process of the first TaskForge configuration's first round "
        "(raw stacks, --idle --threads, 250 Hz; give --jobs enough for the drain to outlast "
        "--profile-seconds; that round's CPU figures include py-spy's pauses)",
    )
    parser.add_argument("--profile-seconds", type=int, default=6)
    parser.add_argument(
        "--variant",
        nargs="+",
        metavar="NAME=VALUE",
        help="also run each TaskForge configuration with these settings (what a setting costs: "
        "LOG_LEVEL=WARNING drops the per-job INFO lines)",
    )
    args = parser.parse_args()
    chosen = configs.selected(args.only)
    if args.variant:
        extra = dict(item.split("=", 1) for item in args.variant)
        suffix = "+" + ",".join(args.variant)
        chosen += [
            dataclasses.replace(c, key=c.key + suffix, env={**c.env, **extra})
            for c in chosen
            if c.system == "taskforge"
        ]
    results: dict[str, list[dict]] = {config.key: [] for config in chosen}
    first_taskforge = next((c for c in chosen if c.system == "taskforge"), None)
    for round_number in range(args.rounds):
        # Every other round in reverse: neither configuration always follows the other.
        for config in chosen if round_number % 2 == 0 else chosen[::-1]:
            spy = args.profile if round_number == 0 and config is first_taskforge else None
            row = one_drain(
                config, args.jobs, args.workers, args.io_wait_ms, spy, args.profile_seconds
            )
            results[config.key].append(row)
            print(
                f"round {round_number + 1} {config.key}: {row['jobs_per_s']:,.0f} jobs/s, "
                f"body {row['body_mean']:.2f} ms, gap {row['gap_mean']:.2f} ms "
                f"(p50 {row['gap_p50']:.2f}), CPU {row['cpu_ms_per_job']:.3f} ms/job, "
                f"Redis {row['redis_cpu_ms_per_job']:.3f}, switches {row['switches_per_job']:.1f} "
                f"voluntary + {row['preempted_per_job']:.1f} preempted a job",
                flush=True,
            )
    print(f"\nmedians of {args.rounds} rounds, {args.jobs:,} jobs, {args.io_wait_ms:g} ms wait:")
    print(
        "| configuration | jobs/s | body ms (mean) | gap ms (mean / p50 / p90) | "
        "CPU ms/job (ours) | Redis CPU ms/job | context switches/job (voluntary + preempted) |"
    )
    print("|---|---|---|---|---|---|---|")
    for key, rows in results.items():
        med = {name: statistics.median(r[name] for r in rows) for name in rows[0]}
        print(
            f"| {key} | {med['jobs_per_s']:,.0f} | {med['body_mean']:.2f} | "
            f"{med['gap_mean']:.2f} / {med['gap_p50']:.2f} / {med['gap_p90']:.2f} | "
            f"{med['cpu_ms_per_job']:.3f} ({_span(rows, 'cpu_ms_per_job')}) | "
            f"{med['redis_cpu_ms_per_job']:.3f} | "
            f"{med['switches_per_job']:.1f} ({_span(rows, 'switches_per_job', 1)}) + "
            f"{med['preempted_per_job']:.1f} |"
        )


def _span(rows: list[dict], name: str, places: int = 3) -> str:
    """Return the least and the greatest of one figure over the rounds, as "a–b"."""
    values = [row[name] for row in rows]
    return f"{min(values):.{places}f}–{max(values):.{places}f}"


if __name__ == "__main__":
    main()
