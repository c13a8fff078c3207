"""Run one configuration's workloads: drain, enqueue-to-start latency, enqueue, Redis cost.

Controller side (TaskForge's .venv). Every process it starts gets its own process group and
is stopped (SIGTERM, then SIGKILL after STOP_GRACE) when its block ends, error or not; every
wait has a deadline.

Methods (the same for every system, TaskForge included):

- **drain**: pre-fill N jobs (untimed), start N workers, wait until N task records exist.
  Rate = N / (last task end − first task start), from the records the task bodies wrote
  (bench.peers.stamp): first job start to last job finish, excluding worker start-up. The
  count of records must be exactly N (a lost or doubled job fails the run).
- **Redis cost**: ``INFO`` before the workers start and as soon as the last record appears.
  commands/job = Δ(sum of commandstats calls) / N, counting commands run inside Lua scripts
  and MULTI/EXEC; round trips/job ≈ Δ total_reads_processed / N (the client requests Redis
  read: a pipeline or a script call is one); CPU µs/job = Δ(used_cpu_sys + used_cpu_user) / N.
  The window includes the workers' start-up and idle polling, which N jobs amortise. The
  enqueue side is the same delta around the (untimed) fill: ``enqueue_redis_cpu_us_per_job``.
- **steady CPU**: from a tenth of the jobs done to the last (start-up out), the CPU of every
  process of the system (bench.peers.cpu) and Redis's, per job run in that window:
  ``processes_cpu_us_per_job``, ``steady_redis_cpu_us_per_job``.
- **memory**: PSS summed over every process of the system (bench.peers.pss), sampled every
  0.2 s from the workers' start to the drain's end; the maximum is reported.
- **I/O body** (``io_wait_ms`` > 0): each job does one Redis round trip and then waits that
  long (bench.peers.stamp.body), identically in every system.
- **latency**: two idle workers; after warm-up jobs, the producer sends jobs 10 ms apart (plus
  the I/O body's wait, so the workers stay idle), each carrying time.time() at sending;
  latency = the task's time.time() at start − that. Redis CPU µs/job over this run covers
  enqueue and run together (through the gateway for TaskForge (HTTP)).
- **enqueue**: one producer process, the library's call in a loop (and its bulk API), timed
  by the producer around the calls, after one warm-up call.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import redis

from bench.peers import cpu, pss
from bench.peers.configs import Config
from bench.peers.stamp import LINE
from tests.support.gunicorn import run_gunicorn
from tests.support.stats import percentile
from tests.support.tools import free_port

ROOT = Path(__file__).resolve().parents[2]
STOP_GRACE = 10.0
STEADY_FROM = 10  # the steady window starts once 1/STEADY_FROM of a drain's jobs ran
START_TIMEOUT = 60.0
PRODUCER_TIMEOUT = 600.0


def root(config: Config) -> Path:
    """Return the checkout a configuration's processes run from (this one unless a tree)."""
    return config.tree or ROOT


def base_env(config: Config, url: str, stamps: Path, io_wait_ms: float = 0) -> dict[str, str]:
    """Return the environment of a configuration's processes."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OTEL_", "PROMETHEUS_", "VIRTUAL_ENV", "PYTHON"))
        and key not in ("REDIS_URL", "TASKFORGE_API_TOKEN")
    }
    env.update(config.env)
    env.update(
        BENCH_REDIS_URL=url,
        BENCH_STAMP_DIR=str(stamps),
        PYTHONPATH=str(root(config)),
        PYTHONUNBUFFERED="1",
        OTEL_TRACING_ENABLED="false",
        BENCH_IO_WAIT_MS=str(io_wait_ms),
    )
    if config.system == "taskforge":
        env.update(
            REDIS_URL=url, LOG_LEVEL="INFO", TASKFORGE_HANDLERS="bench.peers.taskforge_tasks"
        )
    return env


def python(config: Config) -> str:
    """Return the interpreter of a configuration's environment."""
    return config.bin("python")


def produce(
    config: Config, env: dict[str, str], *args: str, timeout: float = PRODUCER_TIMEOUT
) -> dict:
    """Run the configuration's producer with `args`; return the JSON it printed."""
    argv = [python(config), "-m", "bench.peers.runner", config.producer, *args]
    return run_json(argv, root(config), env, timeout, f"{config.key} producer {args}")


def run_json(argv: list[str], cwd: Path, env: dict[str, str], timeout: float, what: str) -> dict:
    """Run a bench process in its own session; return the JSON of its last line of output."""
    out = subprocess.run(
        argv,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        start_new_session=True,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


class Group:
    """Processes started in their own process groups; stop() ends every one of them."""

    def __init__(self, log: Path, cwd: Path = ROOT) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.log = log
        self.cwd = cwd

    def start(self, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as out:
            proc = subprocess.Popen(
                argv,
                cwd=self.cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        return proc

    def check(self) -> None:
        for proc in self.procs:
            if proc.poll() is not None:
                tail = self.log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{proc.args[:3]} exited with {proc.returncode}:\n{tail}")

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            # Whatever is left of the group (children of a master that exited, too) is killed.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self.procs.clear()


@contextlib.contextmanager
def running(
    config: Config, url: str, env: dict[str, str], workers: int, log: Path
) -> Iterator[Group]:
    """Start the configuration's workers (and gateway); stop them all when the block ends."""
    group = Group(log, root(config))
    with contextlib.ExitStack() as stack:
        stack.callback(group.stop)
        env = dict(env)
        if config.system == "taskforge":
            env.update(WORKER_COUNT=str(workers), PORT_WORKER=str(free_port()))
        for argv in config.workers(workers):
            argv = [arg.format(bin=str(Path(config.bin("python")).parent), url=url) for arg in argv]
            group.start(argv, env)
        if config.gateway:
            metrics = Path(tempfile.mkdtemp(prefix="taskforge-bench-gateway-"))
            stack.callback(shutil.rmtree, metrics, ignore_errors=True)
            gateway = stack.enter_context(
                run_gunicorn(url, metrics, python=python(config), base_env=env, log_path=log)
            )
            env["BENCH_GATEWAY_URL"] = gateway.url
            group.check()
        group.env = env  # type: ignore[attr-defined]
        yield group


def stamp_count(stamps: Path) -> int:
    """Return how many task records the stamp files hold."""
    return sum(entry.stat().st_size for entry in os.scandir(stamps)) // LINE


def read_stamps(stamps: Path) -> list[tuple[float, float, float]]:
    """Return every (sent, started, ended) record."""
    rows = []
    for entry in os.scandir(stamps):
        for line in Path(entry.path).read_text().splitlines():
            sent, started, ended = line.split()
            rows.append((float(sent), float(started), float(ended)))
    return rows


def wait_stamps(stamps: Path, count: int, timeout: float, group: Group, what: str) -> None:
    """Poll the stamp files until `count` records exist (or raise after `timeout`)."""
    deadline = time.monotonic() + timeout
    while stamp_count(stamps) < count:
        group.check()
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{what}: {stamp_count(stamps)} of {count} jobs ran in {timeout:.0f} s"
            )
        time.sleep(0.01)


def redis_info(client: redis.Redis) -> dict[str, float]:
    """Return the counters the Redis cost is computed from."""
    info = client.info("all")
    stats = {k[8:]: v for k, v in info.items() if k.startswith("cmdstat_")}
    return {
        "calls": sum(v["calls"] for v in stats.values()),
        "reads": info["total_reads_processed"],
        "cpu": info["used_cpu_sys"] + info["used_cpu_user"],
        "by_command": {name: v["calls"] for name, v in stats.items()},  # type: ignore[dict-item]
        # Microseconds inside each command; a script's own entry includes its commands'.
        "usec_by_command": {name: v["usec"] for name, v in stats.items()},  # type: ignore[dict-item]
    }


def redis_cost(before: dict, after: dict, jobs: int, snapshots: int = 1) -> dict[str, object]:
    """Return commands, round trips and CPU per job between two redis_info snapshots;
    `snapshots`: the harness's own INFO calls in the window (the last one included)."""
    commands = {
        name: after["by_command"][name] - before["by_command"].get(name, 0)
        for name in after["by_command"]
    }
    commands["info"] = commands.get("info", 0) - snapshots  # the snapshots themselves
    usec = {
        name: value - before.get("usec_by_command", {}).get(name, 0)
        for name, value in after.get("usec_by_command", {}).items()
    }
    return {
        "commands_per_job": (after["calls"] - before["calls"] - snapshots) / jobs,
        "round_trips_per_job": (after["reads"] - before["reads"] - snapshots) / jobs,
        "redis_cpu_us_per_job": (after["cpu"] - before["cpu"]) * 1e6 / jobs,
        "commands": {k: round(v / jobs, 3) for k, v in sorted(commands.items()) if v > 0},
        "usec_per_job": {k: round(v / jobs, 3) for k, v in sorted(usec.items()) if v > 0},
    }


class Workspace:
    """One configuration's scratch space: stamp directories and a worker log."""

    def __init__(self, config: Config) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"taskforge-compare-{config.key}-"))
        self.log = self.dir / "workers.log"
        self.count = 0

    def stamps(self) -> Path:
        self.count += 1
        path = self.dir / f"stamps-{self.count}"
        path.mkdir()
        return path

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def drain(
    config: Config,
    url: str,
    jobs: int,
    workers: int,
    ws: Workspace,
    io_wait_ms: float = 0,
) -> dict[str, object]:
    """Drain `jobs` pre-filled jobs with `workers` processes; return rate, Redis cost, PSS."""
    client = redis.Redis.from_url(url)
    client.flushall()
    stamps = ws.stamps()
    env = base_env(config, url, stamps, io_wait_ms)
    before_fill = redis_info(client)
    produce(config, env, "enqueue", "fill", str(jobs))
    before = redis_info(client)
    with running(config, url, env, workers, ws.log) as group:

        def roots() -> list[int]:
            return [proc.pid for proc in group.procs]

        sampler = pss.Sampler(roots).start()
        try:
            timeout = drain_timeout(jobs, workers, io_wait_ms)
            what = f"{config.key} drain ×{workers}"
            # The steady window: from a tenth of the jobs done (every worker is up by then)
            # to the last, so start-up stays out of the CPU per job it gives.
            wait_stamps(stamps, max(1, jobs // STEADY_FROM), timeout, group, what)
            steady = (cpu.tree_cpu_seconds(roots()), redis_info(client), stamp_count(stamps))
            wait_stamps(stamps, jobs, timeout, group, what)
            after = redis_info(client)
            steady_cost = steady_cpu(steady, cpu.tree_cpu_seconds(roots()), after, jobs)
        finally:
            memory = sampler.stop()
    ran = stamp_count(stamps)
    if ran != jobs:
        raise RuntimeError(f"{config.key}: {ran} task runs for {jobs} jobs")
    rows = read_stamps(stamps)
    first = min(row[1] for row in rows)
    last = max(row[2] for row in rows)
    enqueue_cost = redis_cost(before_fill, before, jobs)
    return {
        "jobs": jobs,
        "seconds": last - first,
        "jobs_per_s": jobs / (last - first),
        "concurrency": config.concurrency(workers),
        "io_wait_ms": io_wait_ms,
        **redis_cost(before, after, jobs, snapshots=2),  # and the steady window's start
        "enqueue_path": config.enqueue_path(),
        "enqueue_redis_cpu_us_per_job": enqueue_cost["redis_cpu_us_per_job"],
        **steady_cost,
        **memory,
    }


def steady_cpu(
    before: tuple[float, dict, int], processes_cpu: float, after: dict, jobs: int
) -> dict[str, float]:
    """Return CPU µs per job over the steady window: the system's processes' and Redis's."""
    cpu_before, redis_before, done = before
    ran = jobs - done
    if ran <= 0:
        return {}
    return {
        "steady_jobs": ran,
        "processes_cpu_us_per_job": (processes_cpu - cpu_before) * 1e6 / ran,
        "steady_redis_cpu_us_per_job": (after["cpu"] - redis_before["cpu"]) * 1e6 / ran,
    }


def drain_timeout(jobs: int, workers: int, io_wait_ms: float) -> float:
    """Seconds a drain may take: generous for no-op jobs, plus twice the I/O waits' share."""
    return max(120.0, jobs / 20) + 2 * jobs * io_wait_ms / 1000 / workers


def latency(
    config: Config,
    url: str,
    count: int,
    interval: float,
    ws: Workspace,
    workers: int = 2,
    io_wait_ms: float = 0,
) -> dict[str, object]:
    """Enqueue-to-start latency (ms) of `count` jobs `interval` s apart, idle workers."""
    client = redis.Redis.from_url(url)
    client.flushall()
    stamps = ws.stamps()
    env = base_env(config, url, stamps, io_wait_ms)
    warm = 2 * workers
    with running(config, url, env, workers, ws.log) as group:
        produce(config, group.env, "warm", str(warm), timeout=START_TIMEOUT)  # type: ignore[attr-defined]
        wait_stamps(stamps, warm, START_TIMEOUT, group, f"{config.key} start-up")
        time.sleep(1.0)  # every worker idle and waiting
        before = redis_info(client)
        produce(
            config, group.env, "latency", str(count), str(interval), timeout=count * interval + 120
        )  # type: ignore[attr-defined]
        wait_stamps(stamps, warm + count, 60.0, group, f"{config.key} latency jobs")
        after = redis_info(client)
    values = [(started - sent) * 1000 for sent, started, _ in read_stamps(stamps) if sent > 0]
    if len(values) != count:
        raise RuntimeError(f"{config.key}: {len(values)} latency records for {count} jobs")
    return {
        "jobs": count,
        "p50_ms": percentile(values, 0.50),
        "p95_ms": percentile(values, 0.95),
        "p99_ms": percentile(values, 0.99),
        "max_ms": max(values),
        "workers": config.concurrency(workers),
        "enqueue_path": "HTTP POST /enqueue through the gateway"
        if config.gateway
        else ("engine direct (Scripts.enqueue)" if config.system == "taskforge" else "library API"),
        # Enqueue and run together, idle polling included (count jobs over count × interval s).
        "redis_cpu_us_per_job": redis_cost(before, after, count)["redis_cpu_us_per_job"],
    }


def enqueue(config: Config, url: str, mode: str, jobs: int, ws: Workspace) -> dict[str, float]:
    """One producer enqueueing `jobs` (mode single or bulk); return jobs/s."""
    client = redis.Redis.from_url(url)
    client.flushall()
    env = base_env(config, url, ws.stamps())
    out = produce(config, env, "enqueue", mode, str(jobs))
    client.flushall()
    return {"jobs": jobs, "seconds": out["seconds"], "jobs_per_s": jobs / out["seconds"]}


def check_python() -> None:
    """Refuse to run outside TaskForge's environment (the controller imports shared/)."""
    if not (ROOT / ".venv").exists() or Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        print("note: run with .venv/bin/python (TaskForge's environment)", file=sys.stderr)
