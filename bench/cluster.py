"""Drain throughput on a Redis Cluster: three queues on one master against three on three masters.

A real six-node cluster on loopback (tests.support.cluster). Each master's redis-server is put
in a cgroup of its own with a CPU quota (cgroup v2 ``cpu.max``, or v1 ``cpu.cfs_quota_us``),
QUOTA of one CPU each, so Redis, not the workers, is what runs out: uncapped, on this 2-core
machine, Redis and the workers share the same two cores and the workers are the limit. At 4 %
a master serves about 220 jobs a second, three of them about 650, under what the workers can
do. The period is short (25 ms at 4 %: the kernel's smallest quota is 1 ms), and there are
many workers (16), because a call to a throttled master waits out the period: with few workers
they spent their time waiting, not Redis its CPU. The replicas are left uncapped (they only
apply the writes). The workers serve the three queues with equal weights, so each claim draws
the order anew and they spread over the queues.

Per arrangement: the cluster is emptied, JOBS no-op jobs are enqueued per queue with the caps
lifted, the caps are set, then a workerd (WORKERS processes) serving the three queues drains
them. The rate is taken between 10 % and 90 % of the jobs done (no start-up, no tail). Also the
CPU each master used and the share of Redis commands the master of the global slot
``{taskforge}`` served.

    .venv/bin/python -m bench.cluster --jobs 2000   # needs a writable cgroup (root); ~1 minute
    .venv/bin/python -m bench.cluster --jobs 3000 --workers 24
"""

from __future__ import annotations

import argparse
import contextlib
import math
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from shared.config import Settings
from shared.jobs import validate_enqueue
from shared.keys import Keys
from shared.redis_conn import connect
from shared.scripts import Scripts
from tests.support.cluster import RedisCluster, queue_names_on_distinct_masters, running_cluster
from tests.support.redis_server import RedisServer
from tests.support.tools import cpu_seconds, free_port, wait_until
from tests.support.workerd import running_workerd

QUOTA = 0.04  # of one CPU, per master
JOBS = 2000  # per queue
WORKERS = 16  # more than cores: a worker waiting on a throttled master holds no CPU
BATCH = 500  # jobs per enqueue transaction
# The quota's period: short, so a throttled master makes a caller wait at most this long (at
# the default 100 ms, workers spent their time waiting on throttled masters, not the CPU).
PERIOD_US = 5_000
MIN_QUOTA_US = 1_000
DRAIN_TIMEOUT = 300.0
V2_ROOT = Path("/sys/fs/cgroup")
V1_ROOT = Path("/sys/fs/cgroup/cpu")


class CpuCap:
    """A cgroup holding one process, its CPU quota settable (v2 cpu.max or v1 cfs quota)."""

    def __init__(self, pid: int, name: str) -> None:
        self.v2 = (V2_ROOT / "cgroup.controllers").exists()
        root = V2_ROOT if self.v2 else V1_ROOT
        self.root = root
        self.path = root / name
        self.path.mkdir(exist_ok=True)
        (self.path / "cgroup.procs").write_text(str(pid))
        self.pid = pid

    def set(self, quota: float | None) -> None:
        """Cap the process at `quota` of one CPU (None: no cap)."""
        # The kernel takes no quota under 1 ms: a small share needs a longer period.
        period = PERIOD_US if quota is None else max(PERIOD_US, math.ceil(MIN_QUOTA_US / quota))
        if self.v2:
            value = "max" if quota is None else str(int(quota * period))
            (self.path / "cpu.max").write_text(f"{value} {period}")
        else:
            if quota is None:
                (self.path / "cpu.cfs_quota_us").write_text("-1")
            (self.path / "cpu.cfs_period_us").write_text(str(period))
            if quota is not None:
                (self.path / "cpu.cfs_quota_us").write_text(str(int(quota * period)))

    def remove(self) -> None:
        """Move the process back to the root group (if alive) and delete the group."""
        with contextlib.suppress(OSError):
            (self.root / "cgroup.procs").write_text(str(self.pid))
        with contextlib.suppress(OSError):
            self.path.rmdir()


@contextlib.contextmanager
def capped(masters: list[RedisServer]) -> Iterator[list[CpuCap]]:
    """Put each master in a cgroup of its own (uncapped at first); remove them after."""
    caps: list[CpuCap] = []
    try:
        for master in masters:
            caps.append(CpuCap(master.pid, f"taskforge-bench-{master.port}"))
        yield caps
    except PermissionError as exc:
        raise SystemExit(f"bench.cluster needs a writable cgroup (run as root): {exc}") from exc
    finally:
        for cap in caps:
            cap.set(None)
            cap.remove()


@dataclass
class Result:
    """One arrangement's drain."""

    name: str
    masters_used: int
    jobs_per_s: float
    cpu_s: dict[int, float]  # master port -> CPU seconds during the measured part
    global_share: float  # commands served by the global slot's master / all masters'


def queues_on_one_master(cluster: RedisCluster, count: int = 3) -> list[str]:
    """Return `count` queue names whose slots share one master (not the global slot's)."""
    global_port = cluster.master_of("{taskforge}").port
    by_master: dict[int, list[str]] = {}
    for index in range(5000):
        name = f"q{index}"
        port = cluster.master_of(f"{{taskforge:{name}}}").port
        if port != global_port:
            by_master.setdefault(port, []).append(name)
            if len(by_master[port]) == count:
                return by_master[port]
    raise LookupError("found no queues sharing a master")


def _calls(master: RedisServer) -> int:
    client = master.client()
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return sum(int(v["calls"]) for v in stats.values())


def drain(
    cluster: RedisCluster,
    caps: list[CpuCap],
    name: str,
    queues: list[str],
    quota: float,
    jobs: int,
    workers: int = WORKERS,
) -> Result:
    """Enqueue `jobs` per queue uncapped, cap the masters, drain with a workerd; measure."""
    cluster.flushall()
    url = f"redis+cluster://{cluster.seeds}"
    client = connect(Settings.from_env({"REDIS_URL": url}), role="bench")
    scripts = Scripts(client, Keys())
    for cap in caps:
        cap.set(None)
    for queue in queues:
        scripts.register_queue(queue)
        request = validate_enqueue({"type": "noop", "queue": queue})
        for start in range(0, jobs, BATCH):
            count = min(BATCH, jobs - start)
            scripts.enqueue_many([(request, str(uuid.uuid4())) for _ in range(count)])
    total = jobs * len(queues)
    for cap in caps:
        cap.set(quota)
    masters = cluster.masters()
    global_master = cluster.master_of("{taskforge}")

    def done() -> int:
        counts, _ = scripts.stats(queues)
        return sum(v for k, v in counts.by_state.items() if k.value == "completed")

    settings = {
        "REDIS_URL": url,
        "WORKER_COUNT": str(workers),
        # Equal weights: each claim draws the order anew, so the workers spread over the
        # queues (a strict order would drain one queue, one master, at a time).
        "WORKER_QUEUES": ",".join(f"{queue}:1" for queue in queues),
        "PORT_WORKER": str(free_port()),
        "LOG_LEVEL": "WARNING",
        "TASKFORGE_HANDLERS": "workerd.demo",
        "WORKER_DRAIN_GRACE": "1s",
    }
    samples: list[tuple[float, int, dict[int, float], dict[int, int]]] = []
    with running_workerd(settings, "taskforge-bench-cluster-"):
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while time.monotonic() < deadline:
            cpu = {m.port: cpu_seconds(m.pid) for m in masters}
            calls = {m.port: _calls(m) for m in masters}
            finished = done()
            samples.append((time.monotonic(), finished, cpu, calls))
            if finished >= total:
                break
            time.sleep(0.2)  # sampling interval
    client.close()
    low = next(s for s in samples if s[1] >= total * 0.1)
    high = next(s for s in samples if s[1] >= total * 0.9)
    rate = (high[1] - low[1]) / (high[0] - low[0])
    cpu = {port: high[2][port] - low[2][port] for port in high[2]}
    calls = {port: high[3][port] - low[3][port] for port in high[3]}
    share = calls[global_master.port] / max(1, sum(calls.values()))
    used = len({cluster.master_of(f"{{taskforge:{q}}}").port for q in queues})
    return Result(name, used, rate, cpu, share)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quota", type=float, default=QUOTA, help="CPU per master (of one)")
    parser.add_argument("--jobs", type=int, default=JOBS, help="jobs per queue")
    parser.add_argument("--workers", type=int, default=WORKERS, help="worker processes")
    args = parser.parse_args(argv)
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        raise SystemExit("redis-server and redis-cli must be on PATH (bin/test installs them)")
    with running_cluster(server, cli) as cluster, capped(cluster.masters()) as caps:
        wait_until(lambda: len(cluster.masters()) == 3, 10, "three masters")
        results = [
            drain(
                cluster,
                caps,
                "3 queues, 1 master",
                queues_on_one_master(cluster),
                args.quota,
                args.jobs,
                args.workers,
            ),
            drain(
                cluster,
                caps,
                "3 queues, 3 masters",
                queue_names_on_distinct_masters(cluster),
                args.quota,
                args.jobs,
                args.workers,
            ),
        ]
    print(
        f"each master capped at {args.quota:.0%} of one CPU; {args.workers} workers; "
        f"{args.jobs} no-op jobs per queue"
    )
    print(
        f"{'arrangement':<22} {'masters':>7} {'jobs/s':>8}  master CPU s (measured part)  "
        "global slot's share of commands"
    )
    for r in results:
        cpu = " ".join(f"{v:5.2f}" for _, v in sorted(r.cpu_s.items()))
        print(
            f"{r.name:<22} {r.masters_used:>7} {r.jobs_per_s:>8.0f}  {cpu:<28}  {r.global_share:.1%}"
        )
    print(f"speed-up: {results[1].jobs_per_s / results[0].jobs_per_s:.2f}x")


if __name__ == "__main__":
    main()
