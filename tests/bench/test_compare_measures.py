"""bench.compare's per-system measures: PSS of a process tree, Redis CPU deltas, the I/O
body, the per-k tables and the new flags. Real processes and a real redis-server; the one test
that runs a whole TaskForge drain is marked slow (it needs no peer virtualenv)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

from bench import compare
from bench.peers import configs, cpu, harness, pss, report, stamp
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]
# A parent that starts a child holding 64 MiB of its own pages, prints both pids, then waits.
TREE_SCRIPT = """
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c",
    "import sys, time; b = bytearray(64 << 20); b[::4096] = b'x' * (len(b) // 4096);"
    " print('ready', flush=True); time.sleep(60)"], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print(child.pid, flush=True)
sys.stdin.read()
child.kill()
"""


@pytest.fixture
def process_tree():
    """Yield (parent pid, child pid) of a live two-level tree; end both afterwards."""
    parent = subprocess.Popen(
        [sys.executable, "-c", TREE_SCRIPT],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        child = int(parent.stdout.readline())  # type: ignore[union-attr]
        yield parent.pid, child
    finally:
        parent.stdin.close()  # type: ignore[union-attr]
        parent.wait(timeout=30)


def test_cpu_of_a_tree_counts_a_child_that_burned_cpu() -> None:
    # A parent whose child burns 0.3 s of CPU, then says so and waits.
    burn = (
        "import time; end = time.process_time() + 0.3\n"
        "while time.process_time() < end: pass\n"
        "print('burned', flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys; c = subprocess.Popen([sys.executable,"
            f" '-c', {burn!r}]); sys.stdin.read(); c.kill(); c.wait()",
        ],
        stdin=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while cpu.tree_cpu_seconds([parent.pid]) - (cpu.cpu_seconds(parent.pid) or 0) < 0.25:
            assert time.monotonic() < deadline, "the child's CPU never showed in the tree"
            time.sleep(0.05)
        own = cpu.cpu_seconds(parent.pid)
        assert own is not None and own < 0.25  # the burn is the child's, not the parent's
    finally:
        parent.stdin.close()  # type: ignore[union-attr]
        parent.wait(timeout=30)
    assert cpu.cpu_seconds(parent.pid) is None  # exited and reaped


def test_cpu_reads_a_stat_line_whose_name_holds_spaces_and_parentheses(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime...
    (tmp_path / "42" / "stat").write_text("42 (a (b) c) S 1 42 42 0 -1 0 0 0 0 0 150 50 7 3 20\n")
    assert cpu.cpu_seconds(42, tmp_path) == pytest.approx((150 + 50 + 7 + 3) / cpu.TICKS)
    assert cpu.cpu_seconds(43, tmp_path) is None


def test_steady_cpu_is_per_job_run_in_the_window() -> None:
    before = (2.0, {"cpu": 10.0}, 100)  # processes' CPU s, Redis's snapshot, jobs done
    out = harness.steady_cpu(before, 2.9, {"cpu": 10.3}, 1000)
    assert out["steady_jobs"] == 900
    assert out["processes_cpu_us_per_job"] == pytest.approx(1000.0)
    assert out["steady_redis_cpu_us_per_job"] == pytest.approx(333.33, rel=1e-3)
    assert harness.steady_cpu((2.0, {"cpu": 10.0}, 1000), 2.9, {"cpu": 10.3}, 1000) == {}


def test_pss_reads_smaps_rollup_of_a_live_process() -> None:
    assert pss.readable()
    kib = pss.pss_kib(os.getpid())
    assert kib is not None and kib > 1024  # a Python interpreter with pytest loaded


def test_pss_of_an_exited_process_is_none() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    assert pss.pss_kib(proc.pid) is None


def test_the_tree_counts_every_descendant_and_their_memory(process_tree) -> None:
    parent, child = process_tree
    assert pss.tree([parent]) == {parent, child}
    total, counted = pss.tree_pss_kib([parent])
    assert counted == 2
    # The child's 64 MiB of touched private pages are in the sum.
    assert total >= 64 * 1024 + (pss.pss_kib(parent) or 0)


def test_the_sampler_keeps_the_peak(process_tree) -> None:
    parent, _ = process_tree
    sampler = pss.Sampler(lambda: [parent], interval=0.05).start()
    deadline = time.monotonic() + 10
    while len(sampler.samples) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    out = sampler.stop()
    assert out["pss_samples"] >= 4 and out["pss_processes"] == 2
    assert out["pss_mb"] == round(max(kib for kib, _ in sampler.samples) / 1024, 1)
    assert out["pss_mb"] >= 64


def test_redis_cpu_delta_grows_with_work_done_on_a_real_server(r: redis.Redis) -> None:
    idle_before = harness.redis_info(r)
    idle_after = harness.redis_info(r)
    before = harness.redis_info(r)
    r.eval("local n = 0 for i = 1, 20000000 do n = n + i end return 1", 0)
    after = harness.redis_info(r)
    busy = harness.redis_cost(before, after, 1000)["redis_cpu_us_per_job"]
    idle = harness.redis_cost(idle_before, idle_after, 1000)["redis_cpu_us_per_job"]
    assert busy > 20  # 20 M Lua additions take well over 20 ms of Redis CPU
    assert busy > 10 * idle


def test_the_io_body_makes_one_round_trip_then_waits(
    redis_server: RedisServer, r: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BENCH_REDIS_URL", redis_server.url)
    monkeypatch.setenv("BENCH_STAMP_DIR", str(tmp_path))
    r.config_resetstat()
    stamp.body(0.0, io_wait=0.02)
    assert r.info("commandstats")["cmdstat_get"]["calls"] == 1
    ((sent, started, ended),) = harness.read_stamps(tmp_path)
    assert sent == 0.0
    assert ended - started >= 0.02
    stamp.body(0.0, io_wait=0)  # the no-op body: no GET
    assert r.info("commandstats")["cmdstat_get"]["calls"] == 1
    assert harness.stamp_count(tmp_path) == 2


def test_the_io_wait_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_IO_WAIT_MS", "20")
    assert stamp.io_wait_seconds() == 0.02
    monkeypatch.setenv("BENCH_IO_WAIT_MS", "0")
    assert stamp.io_wait_seconds() == 0
    env = harness.base_env(configs.BY_KEY["huey"], "redis://x:1", Path("/tmp"), 20.0)
    assert env["BENCH_IO_WAIT_MS"] == "20.0"


def test_concurrency_and_enqueue_path_are_described() -> None:
    assert configs.BY_KEY["dramatiq-8"].concurrency(2) == "2 processes × 8 threads"
    assert configs.BY_KEY["taskforge"].concurrency(1) == "1 process × 1 thread"
    assert "engine direct" in configs.BY_KEY["taskforge"].enqueue_path()
    assert "library" in configs.BY_KEY["huey"].enqueue_path()


def test_drain_timeout_allows_for_the_io_waits() -> None:
    assert harness.drain_timeout(1000, 1, 0) == 120.0
    assert harness.drain_timeout(10_000, 1, 20) == 500.0 + 400.0
    assert harness.drain_timeout(10_000, 4, 20) == 500.0 + 100.0


@pytest.mark.parametrize("bad", ["-1", "abc", "nan"])
def test_io_wait_must_be_a_non_negative_number(bad: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench.compare", "--io-wait-ms", bad, "--only", "huey"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "--io-wait-ms" in out.stderr
    assert compare.non_negative("20") == 20.0


def test_per_k_tables_show_every_measure() -> None:
    def drain(rate: float, pss_mb: float) -> dict[str, object]:
        return {
            "jobs_per_s": rate,
            "redis_cpu_us_per_job": 30.0,
            "enqueue_redis_cpu_us_per_job": 12.5,
            "processes_cpu_us_per_job": 250.0,
            "steady_redis_cpu_us_per_job": 28.0,
            "pss_mb": pss_mb,
        }

    results = {
        "settings": {"workers": [1, 2], "io_wait_ms": 20.0, "latency_workers": 2},
        "configs": {
            "taskforge": {
                "label": "TaskForge",
                "concurrency": {"1": "1 process × 1 thread", "2": "2 processes × 1 thread"},
                "enqueue_path": "engine direct",
            },
            "taskforge-http": {"label": "TaskForge (HTTP)"},
        },
        "runs": {
            "taskforge": [
                {
                    "drain": {"1": drain(45.0, 80.0), "2": drain(90.0, 110.0)},
                    "latency": {"p50_ms": 1.5, "p95_ms": 2, "p99_ms": 3, "max_ms": 4},
                }
            ],
            "taskforge-http": [
                {
                    "latency": {
                        "p50_ms": 2.5,
                        "p99_ms": 6.0,
                        "workers": "2 processes × 1 thread",
                        "enqueue_path": "HTTP POST /enqueue through the gateway",
                        "redis_cpu_us_per_job": 77.0,
                    }
                }
            ],
        },
    }
    text = report.per_k_tables(results)
    assert "k = 1 worker process(es), I/O body: one Redis round trip + 20.0 ms wait" in text
    assert (
        "| TaskForge | 2 processes × 1 thread | 90.0 | 30.0 | 12.5 | 250 / 28.0 | engine direct "
        "| 110 | 1.50 |" in text
    )
    # No drain for the HTTP configuration: it appears only in the latency table.
    assert text.count("| TaskForge (HTTP) |") == 1
    assert (
        "| TaskForge (HTTP) | 2 processes × 1 thread | HTTP POST /enqueue through the gateway | "
        "2.50 | 6.00 | 77.0 |" in text
    )
    assert "| TaskForge | ? | ? | 1.50 | 3.00 | — |" in text  # an older result: fields absent


def test_latency_jobs_are_spaced_by_the_io_wait_so_workers_stay_idle() -> None:
    assert compare.latency_interval(argparse.Namespace(io_wait_ms=0.0)) == 0.01
    assert compare.latency_interval(argparse.Namespace(io_wait_ms=20.0)) == pytest.approx(0.03)


@pytest.mark.slow
def test_a_taskforge_drain_reports_pss_of_every_process_and_redis_cost(
    redis_server: RedisServer, r: redis.Redis
) -> None:
    config = configs.BY_KEY["taskforge"]
    ws = harness.Workspace(config)
    try:
        out = harness.drain(config, redis_server.url, 200, 2, ws, io_wait_ms=5)
    finally:
        ws.close()
    assert out["jobs"] == 200 and out["concurrency"] == "2 processes × 1 thread"
    # Supervisor, scheduler, observability server and two workers, at least.
    assert out["pss_processes"] >= 4 and out["pss_mb"] > 10
    assert out["redis_cpu_us_per_job"] > 0 and out["enqueue_redis_cpu_us_per_job"] > 0
    # The steady window: after a tenth of the jobs, so at most 180 of them and at least one.
    assert 1 <= out["steady_jobs"] <= 180
    assert out["processes_cpu_us_per_job"] > 0 and out["steady_redis_cpu_us_per_job"] > 0
    assert out["seconds"] >= 200 * 0.005 / 2
