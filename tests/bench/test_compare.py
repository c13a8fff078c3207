"""bench.compare's rendering and plumbing, from a canned result: no Redis, no peers, no network."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.peers import configs, harness, report, stamp

ROOT = Path(__file__).resolve().parents[2]


def drain(rate: float) -> dict[str, float]:
    return {
        "jobs_per_s": rate,
        "round_trips_per_job": 1.2,
        "commands_per_job": 17.0,
        "redis_cpu_us_per_job": 120.0,
    }


def latency(p50: float, p99: float) -> dict[str, float]:
    return {"p50_ms": p50, "p95_ms": (p50 + p99) / 2, "p99_ms": p99, "max_ms": p99 * 2}


def own(enqueue: float, drain_1: float) -> dict[str, object]:
    return {
        "engine": {"results": {"1": {"enqueue_per_s": enqueue}, "2": {"enqueue_per_s": 9000}}},
        "workers": {
            "drain_jobs_per_s": {"1": drain_1, "2": 3100, "4": 4200, "8": 4300},
            "start_latency_ms": {"p50": 1.2, "p99": 2.5},
        },
        "gateway": {
            "single": [900, 1100, 4500],
            "batch 100": [18000, 40, 9e4],
            "batch 1000": [25000, 30, 1e5],
        },
    }


@pytest.fixture
def results() -> dict:
    canned = {
        "meta": {"commit": "abc1234def", "cpus": 2, "cpu_model": "Test CPU", "dirty": []},
        "settings": {"jobs": 10_000, "repeat": 3, "workers": [1, 2, 4], "latency_jobs": 300},
        "configs": {
            "taskforge": {
                "label": "TaskForge",
                "system": "taskforge",
                "config": "workerd",
                "guarantee": "at least once",
                "drain_jobs": 10_000,
            },
            "taskforge-http": {
                "label": "TaskForge (HTTP)",
                "system": "taskforge",
                "config": "gateway",
                "guarantee": "at least once",
                "drain_jobs": 10_000,
            },
            "huey": {
                "label": "Huey",
                "system": "huey",
                "config": "huey_consumer",
                "guarantee": "none",
                "drain_jobs": 10_000,
            },
            "rq-fork": {
                "label": "RQ (fork)",
                "system": "rq",
                "config": "rq worker",
                "guarantee": "at most once",
                "drain_jobs": 500,
            },
        },
        "versions": {"huey": {"huey": "3.5.4", "redis": "8.1.0"}, "rq": {"rq": "2.12.0"}},
        "pins": {"huey": ["huey==3.5.4"]},
        "runs": {
            "taskforge": [
                {
                    "drain": {w: drain(2000.0 * int(w)) for w in ("1", "2", "4")},
                    "latency": latency(1.3, 2.8),
                    "enqueue": {"single": {"jobs_per_s": 3500}, "bulk": {"jobs_per_s": 16000}},
                }
            ]
            * 3,
            "taskforge-http": [{"latency": latency(2.5, 5.0)}] * 3,
            "huey": [
                {
                    "drain": {
                        w: drain(rate) for w, rate in (("1", 2500.0), ("2", 2800.0), ("4", 2900.0))
                    },
                    "latency": latency(1.1, 2.0),
                    "enqueue": {"single": {"jobs_per_s": 9000}},
                },
                {
                    "drain": {w: drain(2400.0) for w in ("1", "2", "4")},
                    "latency": latency(1.0, 2.2),
                    "enqueue": {"single": {"jobs_per_s": 8000}},
                },
                {
                    "drain": {w: drain(2600.0) for w in ("1", "2", "4")},
                    "latency": latency(1.2, 2.4),
                    "enqueue": {"single": {"jobs_per_s": 8500}},
                },
            ],
            "rq-fork": [
                {"drain": {w: drain(30.0) for w in ("1", "2", "4")}, "latency": latency(300, 500)}
            ]
            * 3,
        },
        "taskforge_own": [own(3300, 2300), own(3600, 2400), own(3500, 2500)],
        "task12": {
            "results": {
                "concurrent_enqueue": {
                    "48": {"jobs_per_s": 900, "ns_per_job": 1.1e6},
                    "10000": {"jobs_per_s": 6000, "ns_per_job": 1.6e5},
                }
            }
        },
    }
    canned["summary"] = report.summarize(canned)
    return canned


def test_summary_takes_median_and_range(results: dict) -> None:
    huey = results["summary"]["huey"]["drain_1"]
    assert huey == {"median": 2500.0, "min": 2400.0, "max": 2600.0, "n": 3}
    assert results["summary"]["tf"]["engine_enqueue"]["median"] == 3500
    assert results["summary"]["tf"]["http_batch_1000"]["median"] == 25000


def test_results_table_puts_taskforge_first_with_ranges(results: dict) -> None:
    table = report.results_table(results)
    head = table.splitlines()[0]
    assert head.index("TaskForge") < head.index("Huey") < head.index("RQ (fork)")
    assert (
        # TaskForge's drain by the peers' method (2,000), not bench.workers' (2,400): like for like.
        "| drain, 1 worker (jobs/s) | 2,000 | 2,500 (2,400–2,600) | 30.0 |" in table
    )
    assert "| drain: jobs per run | 10,000 | 10,000 | 500 |" in table
    assert "| enqueue→start p50 (ms) | 1.30 |" in table  # the peers' method, not bench.workers' 1.2
    assert "2.50 / 5.00" in table  # HTTP enqueue→start p50 / p99


def test_targets_say_met_or_missed(results: dict) -> None:
    text = report.targets_markdown(results)
    assert "engine enqueue, one process ≥ 3,400 jobs/s: **met** — 3,500 jobs/s" in text
    assert "HTTP POST /enqueue ≥ 2,000 req/s: **missed** — 900 req/s" in text
    assert "drain, 1 worker ≥ 2,000 jobs/s: **met**" in text
    assert "enqueue→start p99, HTTP ≤ 6.00 ms: **met**" in text


def test_rows_where_a_peer_leads_are_named(results: dict) -> None:
    lagging = "\n".join(report.not_leading(results))
    assert "drain, 1 worker (jobs/s): TaskForge 2,000; ahead of it: Huey 2,500" in lagging
    assert "enqueue, single call" in lagging  # Huey 8,500 > 3,500


def test_document_has_every_section(results: dict) -> None:
    doc = report.document(results)
    for heading in (
        "## Machine",
        "## Configurations",
        "## Results",
        "## The Go original's Task 12",
        "## Method",
        "## Caveats",
    ):
        assert heading in doc
    assert "![Throughput and latency" in doc
    assert "RQ (fork) 500" in doc  # the smaller drain is stated
    assert "| Concurrent enqueue | 48 | 473 | 900 |" in doc


def test_selection_by_system_and_key() -> None:
    assert [c.key for c in configs.selected(["huey"])] == ["huey"]
    assert {c.key for c in configs.selected(["rq"])} == {"rq-fork", "rq-simple"}
    # The full run: every configuration but those run only when --only names them (threads).
    assert configs.selected(None) == [c for c in configs.CONFIGS if not c.on_request]
    assert {c.key for c in configs.CONFIGS if c.on_request} >= {"taskforge-t2", "taskforge-t8"}
    assert [c.key for c in configs.selected(["taskforge-t8"])] == ["taskforge-t8"]
    assert "taskforge-t8" not in {c.key for c in configs.selected(["taskforge"])}
    with pytest.raises(SystemExit):
        configs.selected(["sidekiq"])


def test_redis_cost_per_job() -> None:
    before = {"calls": 100, "reads": 50, "cpu": 1.0, "by_command": {"get": 10, "info": 1}}
    after = {"calls": 2101, "reads": 1051, "cpu": 1.2, "by_command": {"get": 2010, "info": 2}}
    cost = harness.redis_cost(before, after, 1000)
    assert cost["commands_per_job"] == 2.0
    assert cost["round_trips_per_job"] == 1.0
    assert cost["redis_cpu_us_per_job"] == pytest.approx(200.0)
    assert cost["commands"] == {"get": 2.0}
    # A drain reads INFO once more inside its window (the steady part's start): left out too.
    after = {**after, "calls": 2102, "reads": 1052, "by_command": {"get": 2010, "info": 3}}
    cost = harness.redis_cost(before, after, 1000, snapshots=2)
    assert (cost["commands_per_job"], cost["round_trips_per_job"]) == (2.0, 1.0)
    assert cost["commands"] == {"get": 2.0}


def test_stamp_lines_are_fixed_width(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BENCH_STAMP_DIR", str(tmp_path))
    stamp.record(1.5, 1700000000.25)
    stamp.record(-1.0, 1700000000.5)
    assert harness.stamp_count(tmp_path) == 2
    rows = harness.read_stamps(tmp_path)
    assert rows[0][:2] == (1.5, 1700000000.25)
    assert all(entry.stat().st_size == 2 * stamp.LINE for entry in os.scandir(tmp_path))


@pytest.mark.parametrize(
    ("module", "flags"),
    [("bench.compare", ("--quick", "--only")), ("bench.io_cycle", ("--variant", "--only"))],
)
def test_help_runs(module: str, flags: tuple[str, ...]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert all(flag in out.stdout for flag in flags)


def test_a_base_tree_adds_the_8_thread_configuration_running_its_code(tmp_path: Path) -> None:
    probe = "from bench.peers import configs; c = configs.BY_KEY.get('taskforge-t8-base'); "
    probe += "print(c and (c.tree, c.env, c.on_request))"
    outputs = []
    for extra in ({}, {"BENCH_BASE_TREE": str(tmp_path)}):
        env = {k: v for k, v in os.environ.items() if k != "BENCH_BASE_TREE"} | extra
        out = subprocess.run(
            [sys.executable, "-c", probe],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        outputs.append(out.stdout.strip())
    assert outputs[0] == "None"
    assert outputs[1] == repr((tmp_path.resolve(), {"WORKER_THREADS": "8"}, True))
