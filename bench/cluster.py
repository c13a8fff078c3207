"""Drain throughput of 3 queues on 1 Redis Cluster master against 3 queues on 3 masters.

    .venv/bin/python -m bench.cluster                       # 3 rounds, 6,000 jobs a drain
    .venv/bin/python -m bench.cluster --rounds 1 --jobs 3000 --cpu-percent 0   # no cap

One real cluster (tests/support/cluster.py: 6 nodes, 3 masters with a replica each) serves
both layouts, so the comparison is fair: same servers, same workerd, same WORKER_QUEUES
(``a:1,b:1,c:1``, weighted alike); only where the queues' hash tags land differs:

- one master: three queue names whose ``{taskforge:<queue>}`` slots the master of the global
  slot ``{taskforge}`` owns (the worker registry, heartbeats, the queue list), so all the
  work is on one master, as on a single Redis;
- three masters: three names on three different masters (one of them holds the global slot).

Redis's CPU must be the bottleneck, and on a 2-core machine the Python workers would be
(they spend several times Redis's CPU per job). So each master runs in a cgroup of its own
capped at ``--cpu-percent`` of a core (bench/cpu_cap.py); the replicas are not capped (they
are off the path of a drain). The drain is the real ``python -m workerd`` (WORKER_COUNT
workers claiming and completing no-op jobs): the path production runs, including the
cluster's per-queue claim calls and the heartbeats, not an engine loop of our own.

Measured over the steady part of each drain (from the first 10% of the jobs done to 90%),
by polling the completed counts: jobs/s; each master's CPU (INFO used_cpu_sys+user) as a
share of its cap and per job; the share of the cgroup periods the cap throttled it; the
workerd's CPU (its processes' /proc stat) and the host's idle CPU, which show the workers
had CPU to spare; then, for IDLE_SECONDS after the drain, what each busy master spends a
second with every worker idle (heartbeats, the scheduler, idle polls). Rounds alternate the layouts; figures are medians over rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path

import redis

from bench.cpu_cap import CpuCap, can_cap
from shared.connect.redis_conn import connect
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import validate_enqueue
from shared.read.directory import QueueDirectory
from shared.settings.config import Settings
from tests.support.cluster import RedisCluster, queue_names_on_distinct_masters, running_cluster
from tests.support.redis_server import RedisServer, redis_binary
from tests.support.tools import cpu_seconds, free_port, require_tool
from tests.support.workerd import Workerd, running_workerd

BATCH = 500  # jobs per enqueue_many call while filling
POLL = 0.2  # seconds between two samples of the completed counts and CPU counters
IDLE_SECONDS = 2.0  # after a drain: what the busy masters spend a second with nothing to do
DRAIN_TIMEOUT = 600.0
WINDOW = (0.1, 0.9)  # the steady part of a drain: from this share of the jobs done to that
# Longer than the default 2 s: a capped master may be throttled for a whole period, and a
# node silent past the timeout would be failed over in the middle of a drain.
NODE_TIMEOUT_MS = 15_000
LAYOUTS = ("one_master", "three_masters")


@dataclasses.dataclass
class Sample:
    """Counters read at one moment of a drain."""

    at: float  # time.monotonic()
    done: int  # jobs completed, all queues
    redis_cpu: dict[int, float]  # master port -> used_cpu_sys + used_cpu_user (s)
    commands: dict[int, int]  # master port -> total_commands_processed (a script counts 1)
    throttled: dict[int, tuple[int, int, float]]  # master port -> cgroup periods, throttled
    workerd_cpu: float  # s, the supervisor and its children
    host_idle: float  # s of idle CPU, all cores (/proc/stat)


def host_idle_seconds() -> float:
    """Return the machine's idle + iowait CPU seconds so far, summed over cores."""
    with open("/proc/stat") as stat:
        fields = stat.readline().split()[1:]
    return (int(fields[3]) + int(fields[4])) / os.sysconf("SC_CLK_TCK")


def queues_on_one_master(cluster: RedisCluster, master: RedisServer, count: int = 3) -> list[str]:
    """Return `count` queue names whose hash tags land on `master`."""
    names = []
    for index in range(10_000):
        name = f"m{index}"
        if cluster.master_of(f"{{taskforge:{name}}}").port == master.port:
            names.append(name)
            if len(names) == count:
                return names
    raise LookupError(f"found no {count} queue names on the master at port {master.port}")


def fill(client: redis.Redis, queues: list[str], jobs: int) -> None:
    """Enqueue `jobs` no-op jobs spread evenly over `queues`, each queue listed first."""
    scripts = Scripts(client, Keys())
    directory = QueueDirectory(scripts)
    for n, queue in enumerate(queues):
        directory.ensure(queue)
        count = jobs // len(queues) + (1 if n < jobs % len(queues) else 0)
        request = validate_enqueue({"type": "demo.noop", "payload": {}, "queue": queue})
        for start in range(0, count, BATCH):
            size = min(BATCH, count - start)
            scripts.enqueue_many([(request, str(uuid.uuid4())) for _ in range(size)])


def completed(client: redis.Redis, queues: list[str]) -> int:
    """Return how many jobs of `queues` are completed (a ZCARD per queue)."""
    return sum(client.zcard(Keys(queue=q).completed) for q in queues)


def sample(
    client: redis.Redis,
    queues: list[str],
    masters: dict[int, redis.Redis],
    caps: dict[int, CpuCap],
    host: Workerd,
) -> Sample:
    """Read every counter once."""
    redis_cpu, commands = {}, {}
    for port, direct in masters.items():
        info = direct.info("cpu")
        redis_cpu[port] = info["used_cpu_sys"] + info["used_cpu_user"]
        commands[port] = direct.info("stats")["total_commands_processed"]
    workerd_cpu = 0.0
    for pid in host.processes():
        try:
            workerd_cpu += cpu_seconds(pid)
        except OSError:  # exited since the scan: its time is lost to this sum, not others'
            continue
    return Sample(
        at=time.monotonic(),
        done=completed(client, queues),
        redis_cpu=redis_cpu,
        commands=commands,
        throttled={port: cap.throttled() for port, cap in caps.items()},
        workerd_cpu=workerd_cpu,
        host_idle=host_idle_seconds(),
    )


def steady_window(samples: list[Sample], jobs: int) -> tuple[Sample, Sample]:
    """Return the first samples at or past WINDOW[0] and WINDOW[1] of the jobs done."""
    start = next(s for s in samples if s.done >= jobs * WINDOW[0])
    end = next(s for s in samples if s.done >= jobs * WINDOW[1])
    if end.done - start.done < jobs * 0.5:
        raise RuntimeError("too few samples in the drain's steady part: raise --jobs")
    return start, end


def figures(start: Sample, end: Sample, busy: list[int], cap_percent: float) -> dict[str, float]:
    """Return a drain's figures between two samples; `busy`: the masters holding the queues
    and the global slot."""
    seconds, jobs = end.at - start.at, end.done - start.done
    cpu = {port: end.redis_cpu[port] - start.redis_cpu[port] for port in busy}
    out = {
        "jobs_per_s": jobs / seconds,
        # What a shard's capacity model divides a core by: the busy masters' CPU per job.
        "redis_cpu_us_per_job": sum(cpu.values()) * 1e6 / jobs,
        "redis_core_share_each": statistics.mean(c / seconds for c in cpu.values()),
        # Our own two INFO calls per master and sample are left in: a few per second.
        "commands_per_job": sum(end.commands[p] - start.commands[p] for p in busy) / jobs,
        "workerd_cores": (end.workerd_cpu - start.workerd_cpu) / seconds,
        "host_idle_cores": (end.host_idle - start.host_idle) / seconds,
    }
    if cap_percent:
        out["redis_use_of_cap"] = out["redis_core_share_each"] / (cap_percent / 100)
        periods = [end.throttled[p][0] - start.throttled[p][0] for p in busy]
        throttled = [end.throttled[p][1] - start.throttled[p][1] for p in busy]
        out["periods_throttled"] = sum(throttled) / max(1, sum(periods))
    return out


def drain(
    cluster: RedisCluster,
    queues: list[str],
    args: argparse.Namespace,
    caps: dict[int, CpuCap],
) -> dict[str, float]:
    """Fill `queues`, drain them with a real workerd, and return the steady-state figures."""
    url = "redis+cluster://" + cluster.seeds
    client = connect(Settings.from_env({"REDIS_URL": url}), role="bench")
    masters = {m.port: m.client() for m in cluster.masters()}
    try:
        cluster.flushall()
        fill(client, queues, args.jobs)
        holders = {cluster.master_of(f"{{taskforge:{q}}}").port for q in queues}
        busy = sorted(holders | {cluster.master_of("{taskforge}").port})
        settings = {
            "REDIS_URL": url,
            "WORKER_COUNT": str(args.workers),
            "WORKER_QUEUES": ",".join(f"{q}:1" for q in queues),
            "PORT_WORKER": str(free_port()),
            "TASKFORGE_HANDLERS": "workerd.demo",
            "LOG_LEVEL": "WARNING",  # INFO lines per job would cost the workers, not Redis
        }
        samples: list[Sample] = []
        deadline = time.monotonic() + DRAIN_TIMEOUT
        with running_workerd(settings, "taskforge-bench-cluster-") as host:
            while not samples or samples[-1].done < args.jobs:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"drain unfinished after {DRAIN_TIMEOUT} s\n{host.tail()}")
                if host.proc.poll() is not None:
                    raise RuntimeError(f"workerd exited\n{host.tail()}\n{host.stderr()}")
                samples.append(sample(client, queues, masters, caps, host))
                time.sleep(POLL)  # the sampling cadence
            time.sleep(IDLE_SECONDS)  # a measuring window, not a wait for anything
            idle = sample(client, queues, masters, caps, host)
        start, end = steady_window(samples, args.jobs)
        out = figures(start, end, busy, args.cpu_percent)
        idle_cpu = sum(idle.redis_cpu[p] - samples[-1].redis_cpu[p] for p in busy)
        out["idle_redis_cpu_us_per_s_each"] = (
            idle_cpu * 1e6 / (idle.at - samples[-1].at) / len(busy)
        )
        return {**out, "masters_used": len(busy)}
    finally:
        client.close()
        for direct in masters.values():
            direct.close()


def measure(args: argparse.Namespace) -> dict[str, object]:
    """Run both layouts in alternating rounds on one capped cluster; return every round."""
    started = time.monotonic()
    results: dict[str, list[dict[str, float]]] = {layout: [] for layout in LAYOUTS}
    with running_cluster(
        redis_binary(), require_tool("redis-cli"), node_timeout_ms=NODE_TIMEOUT_MS
    ) as cluster:
        masters = cluster.masters()
        caps: dict[int, CpuCap] = {}
        try:
            if args.cpu_percent:
                for master in masters:
                    name = f"taskforge-bench-{os.getpid()}-{master.port}"
                    caps[master.port] = CpuCap.create(name, args.cpu_percent, args.period_us)
                    caps[master.port].add(master.pid)
            spread = queue_names_on_distinct_masters(cluster, 3)
            together = queues_on_one_master(cluster, cluster.master_of("{taskforge}"))
            layouts = {"one_master": together, "three_masters": spread}
            for round_no in range(args.rounds):
                for layout in LAYOUTS if round_no % 2 == 0 else reversed(LAYOUTS):
                    run = drain(cluster, layouts[layout], args, caps)
                    run["load_average"] = os.getloadavg()[0]
                    results[layout].append(run)
                print(
                    f"round {round_no + 1} of {args.rounds} done (load {os.getloadavg()[0]:.1f})",
                    file=sys.stderr,
                )
        finally:
            cluster.stop()
            for cap in caps.values():
                cap.remove()
    return {
        "date": datetime.date.today().isoformat(),
        "platform": f"{platform.platform()}, {os.cpu_count()} cpus",
        "minutes": (time.monotonic() - started) / 60,
        "args": vars(args) | {"json": str(args.json)},
        "queues": layouts,
        "results": results,
    }


ROWS = (
    ("jobs/s", "jobs_per_s", "{:,.0f}"),
    ("Redis CPU µs/job (busy masters)", "redis_cpu_us_per_job", "{:.0f}"),
    ("Redis commands/job (busy masters)", "commands_per_job", "{:.1f}"),
    ("each busy master's CPU, share of a core", "redis_core_share_each", "{:.3f}"),
    ("  of its cap", "redis_use_of_cap", "{:.0%}"),
    ("cgroup periods throttled", "periods_throttled", "{:.0%}"),
    (
        "idle Redis CPU after the drain, µs/s per busy master",
        "idle_redis_cpu_us_per_s_each",
        "{:,.0f}",
    ),
    ("workerd CPU, cores", "workerd_cores", "{:.2f}"),
    ("host idle CPU, cores", "host_idle_cores", "{:.2f}"),
)


def cell(runs: list[dict[str, float]], key: str, fmt: str) -> str:
    """Return `key`'s median over runs, with min–max when there are several."""
    values = [run[key] for run in runs if key in run]
    if not values:
        return "–"
    text = fmt.format(statistics.median(values))
    if len(values) > 1:
        text += f" ({fmt.format(min(values))}–{fmt.format(max(values))})"
    return text


def report(doc: dict) -> str:
    """Return the table (median, min–max over rounds) and the 3-masters / 1-master ratio."""
    args, results = doc["args"], doc["results"]
    cap = f"{args['cpu_percent']}% of a core each" if args["cpu_percent"] else "uncapped"
    lines = [
        f"{doc['date']} · {doc['platform']} · {args['rounds']} round(s) of {args['jobs']:,} "
        f"no-op jobs, workerd WORKER_COUNT={args['workers']} · masters {cap} "
        f"(cgroup period {args['period_us']} µs) · {doc['minutes']:.1f} min",
        f"queues: {doc['queues']}",
        "",
        "| figure | 3 queues on 1 master | 3 queues on 3 masters |",
        "|---|---|---|",
    ]
    for title, key, fmt in ROWS:
        lines.append(
            f"| {title} | {cell(results['one_master'], key, fmt)} | "
            f"{cell(results['three_masters'], key, fmt)} |"
        )
    rates = [statistics.median(r["jobs_per_s"] for r in results[lay]) for lay in LAYOUTS]
    lines += ["", f"3 masters / 1 master, jobs/s (medians): {rates[1] / rates[0]:.2f}×"]
    return "\n".join(lines)


def main() -> None:
    """Measure both layouts; print the table (and write JSON with --json)."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=4_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=12, help="workerd's WORKER_COUNT")
    parser.add_argument("--cpu-percent", type=float, default=2.0, help="each master's cap; 0: none")
    parser.add_argument("--period-us", type=int, default=50_000, help="the cgroup's period")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.cpu_percent and (why := can_cap()):
        raise SystemExit(f"cannot cap Redis's CPU: {why} (or run with --cpu-percent 0)")
    doc = measure(args)
    print(report(doc))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
