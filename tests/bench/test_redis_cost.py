"""bench.redis_cost's breakdown and bench.ab's plumbing, from canned figures: no Redis started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import ab, instructions, redis_cost
from bench.peers import harness
from tests.support.tools import require_tool

ROOT = Path(__file__).resolve().parents[2]


def test_the_breakdown_splits_redis_cpu_into_scripts_their_commands_and_the_rest() -> None:
    before = {"calls": 0, "reads": 0, "cpu": 1.0, "by_command": {}, "usec_by_command": {}}
    after = {
        "calls": 5001,  # 1,000 scripts, 4,000 commands inside, the INFO snapshot
        "reads": 1001,
        "cpu": 1.1,  # 100 µs per job
        "by_command": {"evalsha": 1000, "hset": 2000, "zadd": 2000, "info": 1},
        "usec_by_command": {"evalsha": 60_000, "hset": 15_000, "zadd": 10_000, "info": 5_000},
    }
    cost = harness.redis_cost(before, after, 1000)
    split = redis_cost.breakdown(cost, cost["redis_cpu_us_per_job"], {"hset", "zadd"})
    assert split["scripts_us"] == 60.0
    assert split["script_commands_us"] == 25.0
    assert split["lua_us"] == 35.0
    assert split["other_commands_us"] == 5.0
    assert split["outside_commands_us"] == pytest.approx(35.0)
    assert split["top_level_calls"] == 1.0  # the scripts; the snapshot's INFO is not a job's


def test_the_commands_inside_scripts_are_read_from_the_trees_lua() -> None:
    inner = redis_cost.script_commands(ROOT)
    assert {"zpopmin", "hmget", "time"} <= inner
    assert "evalsha" not in inner and "blpop" not in inner


def test_a_side_is_a_directory_or_an_exported_revision(tmp_path: Path) -> None:
    assert ab.side_tree(str(ROOT), tmp_path) == ROOT
    tree = ab.side_tree("HEAD", tmp_path / "head")
    assert (tree / "shared" / "engine" / "lua" / "claim.lua").exists()
    assert redis_cost.label_of(tree) == (tree / "COMMIT").read_text()[:7]


def test_figures_show_thousands_apart_and_small_values_to_three_digits() -> None:
    assert redis_cost.median_range([2756.4, 3970.2, 2500.0]) == "2,756 (2,500–3,970)"
    assert redis_cost.median_range([0.0371]) == "0.0371"


@pytest.mark.parametrize(
    ("module", "option"),
    [("bench.ab", "--rounds"), ("bench.redis_cost", "--tree"), ("bench.instructions", "--tree")],
)
def test_help_runs(module: str, option: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert option in out.stdout


def test_callgrind_totals_are_read_from_a_dump() -> None:
    dump = b"events: Ir\nsummary: 0\ntotals: 202058\n"
    match = instructions.TOTAL.search(dump)
    assert match is not None and int(match.group(1)) == 202058


@pytest.mark.slow
def test_instructions_per_job_are_counted_for_this_checkout() -> None:
    require_tool("valgrind")  # bin/test installs it; missing under CI fails, elsewhere skips
    figures = instructions.measure(ROOT, 20)
    # A job costs Redis tens of thousands of instructions at least, and far from millions.
    assert 20_000 < figures["enqueue"] < 1_000_000
    assert 20_000 < figures["complete_claim_next"] < 1_000_000
