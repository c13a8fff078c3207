"""Compare TaskForge with RQ, Celery, Dramatiq and Huey in one run.

Every peer is installed by this command in its own virtualenv under var/bench-venvs/ (pinned
in bench/peers/venvs.py; never in requirements.txt) and runs against its own private
redis-server, with one-job-at-a-time worker processes and in the configuration its
documentation recommends (bench/peers/configs.py). TaskForge's headline figures come from
bench.engine, bench.workers and bench.gateway (run as subprocesses with --json); the figures
those do not give (p95, Redis round trips and CPU per job, HTTP enqueue-to-start, the Task 12
table) come from bench/peers/harness.py and bench/peers/task12.py. Repetitions are
interleaved (every configuration once, then again), so a busy moment on the machine hits
every system alike.

    .venv/bin/python -m bench.compare            # the full run (about 25 minutes)
    .venv/bin/python -m bench.compare --full-size  # 10,000-job drains everywhere (~40 min)
    .venv/bin/python -m bench.compare --quick    # a smoke run: small, one repetition
    .venv/bin/python -m bench.compare --only taskforge huey
    .venv/bin/python -m bench.compare --only taskforge dramatiq-8 huey --io-wait-ms 20 \
        --jobs 1000 --workers 1 2 --repeat 1 --no-own    # I/O-bound jobs, no own benchmarks

Beside the results table it prints one table per worker count k: jobs/s, Redis CPU µs per
job (run side, and the enqueue side with the path the jobs took), the system's PSS in MB at
its peak during the drain, and enqueue→start p50 with idle workers.

The full run writes bench/results/compare.json, bench/BENCHMARKS.md and bench/benchmarks.png;
--quick and --only write bench/results/compare-quick.json unless --json/--doc say otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.peers import configs, harness, report, venvs
from tests.support.redis_server import private_redis

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "compare.json"
QUICK_RESULTS = ROOT / "bench" / "results" / "compare-quick.json"
DOC = ROOT / "bench" / "BENCHMARKS.md"
CHART = ROOT / "bench" / "benchmarks.png"
BENCH_TIMEOUT = 900.0


def log(message: str) -> None:
    """Print a progress line with the time."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def sh(*argv: str) -> str:
    """Return a command's output, or '' when it fails."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine() -> dict[str, object]:
    """Describe the machine, the commit and the tools measured with."""
    lscpu = dict(line.split(":", 1) for line in sh("lscpu").splitlines() if ":" in line)
    redis_version = sh(shutil.which("redis-server") or "redis-server", "--version")
    return {
        # A frozen export (git archive) has no .git: its commit comes from the environment.
        "commit": sh("git", "-C", str(ROOT), "rev-parse", "HEAD")
        or os.environ.get("TASKFORGE_BENCH_COMMIT", "?"),
        "dirty": sh("git", "-C", str(ROOT), "diff", "--name-only", "HEAD").split(),
        "frozen_export": not (ROOT / ".git").exists(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu_model": lscpu.get("Model name", "?").strip(),
        "cpus": os.cpu_count(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "redis_server": redis_version.split(" sha=")[0],
        "redis_binary": shutil.which("redis-server"),
        "load_average_start": os.getloadavg()[0],
    }


def own_bench(module: str, *args: str) -> dict:
    """Run one of TaskForge's own benchmarks with --json; return what it wrote."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        proc = subprocess.run(
            [sys.executable, "-m", module, *args, "--json", out.name],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=BENCH_TIMEOUT,
            env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{module} failed:\n{proc.stderr[-3000:]}")
        return json.loads(Path(out.name).read_text())


def taskforge_own(args: argparse.Namespace) -> dict[str, object]:
    """One repetition of bench.engine, bench.workers and bench.gateway."""
    jobs = str(args.jobs)
    log("  bench.engine")
    engine = own_bench("bench.engine", "--jobs", jobs, "--repeat", "1")
    log("  bench.workers (1, 2, 4, 8 workers)")
    workers = own_bench("bench.workers", "--jobs", jobs, "--workers", "1", "2", "4", "8")
    log("  bench.gateway")
    gateway = own_bench("bench.gateway", "--seconds", str(args.http_seconds))
    return {"engine": engine, "workers": workers, "gateway": gateway}


def run_config(
    config: configs.Config, url: str, args: argparse.Namespace, first_of_system: bool
) -> dict[str, object]:
    """One repetition of every workload of one configuration."""
    ws = harness.Workspace(config)
    out: dict[str, object] = {}
    try:
        if not config.gateway:
            jobs = drain_jobs(config, args)
            out["drain"] = {}
            for workers in args.workers:
                log(f"  {config.key}: drain {jobs:,} jobs, {workers} worker(s)")
                out["drain"][str(workers)] = harness.drain(  # type: ignore[index]
                    config, url, jobs, workers, ws, io_wait_ms=args.io_wait_ms
                )
        log(f"  {config.key}: enqueue→start latency, {args.latency_jobs} jobs")
        out["latency"] = harness.latency(
            config, url, args.latency_jobs, latency_interval(args), ws, io_wait_ms=args.io_wait_ms
        )
        if first_of_system and not config.gateway:
            out["enqueue"] = {}
            for mode in ("single", "bulk"):
                if mode == "bulk" and config.system == "huey":
                    continue
                log(f"  {config.key}: enqueue {args.jobs:,} jobs ({mode})")
                out["enqueue"][mode] = harness.enqueue(config, url, mode, args.jobs, ws)  # type: ignore[index]
    finally:
        ws.close()
    return out


def latency_interval(args: argparse.Namespace) -> float:
    """Seconds between latency jobs: 10 ms plus the I/O body's wait, so the workers stay idle
    (jobs 10 ms apart with a 20 ms body would queue up behind two workers and measure the
    backlog, not the start latency)."""
    return 0.01 + args.io_wait_ms / 1000


def drain_jobs(config: configs.Config, args: argparse.Namespace) -> int:
    """Return the drain size of a configuration: the slowest drain fewer (see configs.py)."""
    if config.jobs and not args.full_size:
        return min(args.jobs, config.jobs)
    return args.jobs


def non_negative(text: str) -> float:
    """argparse type: a number of milliseconds ≥ 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0: {text!r}")
    return value


def main() -> None:
    """Parse the command line, run every selected workload, write JSON, the doc and chart."""
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 300 jobs, 1 repetition")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="systems or configuration keys")
    parser.add_argument("--jobs", type=int, help="jobs per enqueue and drain run (10,000)")
    parser.add_argument("--repeat", type=int, help="repetitions (3); median and range shown")
    parser.add_argument(
        "--full-size",
        action="store_true",
        help="drain --jobs in every configuration, the slow ones too (about 40 minutes)",
    )
    parser.add_argument("--latency-jobs", type=int, help="jobs 10 ms apart (300)")
    parser.add_argument("--http-seconds", type=float, help="bench.gateway --seconds (5)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument(
        "--io-wait-ms",
        type=non_negative,
        default=0.0,
        help="I/O-bound job body: one Redis round trip, then wait this long (0: no-op body)",
    )
    parser.add_argument(
        "--no-own",
        action="store_true",
        help="skip TaskForge's own benchmarks (bench.engine/workers/gateway) and the Task 12 table",
    )
    parser.add_argument("--json", type=Path, help="results file")
    parser.add_argument(
        "--doc", type=Path, help="markdown file to write (full run: bench/BENCHMARKS.md)"
    )
    parser.add_argument("--no-doc", action="store_true", help="write only the JSON")
    parser.add_argument(
        "--from-json", type=Path, help="only render the doc and chart from a results file"
    )
    args = parser.parse_args()
    full = not args.quick and not args.only
    args.jobs = args.jobs or (300 if args.quick else 10_000)
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.latency_jobs = args.latency_jobs or (50 if args.quick else 300)
    args.http_seconds = args.http_seconds or (1.0 if args.quick else 5.0)
    json_path = args.json or (RESULTS if full else QUICK_RESULTS)
    doc_path = args.doc or (DOC if full else None)

    if args.from_json:
        results = json.loads(args.from_json.read_text())
        # Descriptions (not measurements) come from the code as it is now.
        for key, described in results.get("configs", {}).items():
            if key in configs.BY_KEY:
                c = configs.BY_KEY[key]
                described.update(label=c.label, config=c.config, guarantee=c.guarantee)
                workers = results.get("settings", {}).get("workers", [1, 2, 4])
                described.setdefault("concurrency", {str(w): c.concurrency(w) for w in workers})
                described.setdefault("enqueue_path", c.enqueue_path())
        results["summary"] = report.summarize(results)
        write_doc(results, args.doc or DOC)
        return

    selected = configs.selected(args.only)
    started = time.monotonic()
    meta = machine()
    meta["command"] = " ".join([".venv/bin/python -m bench.compare", *sys.argv[1:]])
    log(
        f"commit {meta['commit'][:10]} · {meta['cpu_model']} · {meta['cpus']} cpus · {meta['redis_server']}"
    )
    versions: dict[str, dict[str, str]] = {}
    for system in sorted({c.system for c in selected} - {"taskforge"}):
        log(f"virtualenv for {system}")
        versions[system] = venvs.ensure(system, log=log)
    versions["taskforge"] = {
        "redis": sh(sys.executable, "-c", "import redis; print(redis.__version__)")
    }

    runs: dict[str, list[dict[str, object]]] = {c.key: [] for c in selected}
    own: list[dict[str, object]] = []
    task12: dict[str, object] | None = None
    seen: set[str] = set()
    firsts = set()
    for config in selected:
        if config.system not in seen and not config.gateway:
            firsts.add(config.key)
            seen.add(config.system)
    with contextlib.ExitStack() as stack:
        # One private redis-server per configuration, kept for all repetitions.
        urls = {c.key: stack.enter_context(private_redis()).url for c in selected}
        for rep in range(args.repeat):
            log(f"repetition {rep + 1} of {args.repeat}")
            if any(c.system == "taskforge" for c in selected) and not args.no_own:
                own.append(taskforge_own(args))
            for config in selected:
                runs[config.key].append(
                    run_config(config, urls[config.key], args, config.key in firsts)
                )
    if any(c.system == "taskforge" for c in selected) and not args.no_own:
        log("Task 12 table (engine)")
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "bench.peers.task12",
                    "--jobs",
                    str(args.jobs),
                    "--json",
                    out.name,
                ],
                cwd=ROOT,
                check=True,
                timeout=BENCH_TIMEOUT,
                stdout=subprocess.DEVNULL,
            )
            task12 = json.loads(Path(out.name).read_text())

    meta["load_average_end"] = os.getloadavg()[0]
    meta["minutes"] = round((time.monotonic() - started) / 60, 1)
    results = {
        "meta": meta,
        "settings": {
            "jobs": args.jobs,
            "repeat": args.repeat,
            "full_size": args.full_size,
            "latency_jobs": args.latency_jobs,
            "latency_interval_ms": round(latency_interval(args) * 1000, 3),
            "latency_workers": 2,
            "http_seconds": args.http_seconds,
            "workers": args.workers,
            "io_wait_ms": args.io_wait_ms,
            "log_level": "INFO",
            "quick": args.quick,
        },
        "configs": {
            c.key: {
                "label": c.label,
                "system": c.system,
                "config": c.config,
                "guarantee": c.guarantee,
                "drain_jobs": drain_jobs(c, args),
                "concurrency": {str(w): c.concurrency(w) for w in args.workers},
                "enqueue_path": c.enqueue_path(),
            }
            for c in selected
        },
        "versions": versions,
        "pins": {system: venvs.PINS[system] for system in versions if system in venvs.PINS},
        "runs": runs,
        "taskforge_own": own,
        "task12": task12,
    }
    results["summary"] = report.summarize(results)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")
    log(f"wrote {json_path.relative_to(ROOT) if json_path.is_relative_to(ROOT) else json_path}")
    print(report.results_table(results))
    print()
    print(report.targets_markdown(results))
    print()
    print(report.per_k_tables(results))
    if doc_path and not args.no_doc:
        write_doc(results, doc_path)
    log(f"done in {meta['minutes']} minutes")


def write_doc(results: dict, doc_path: Path) -> None:
    """Write the markdown document and, beside it, the chart."""
    chart = doc_path.parent / CHART.name
    doc_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        venvs.ensure("plot", log=log)
        with tempfile.NamedTemporaryFile("w", suffix=".json") as data:
            json.dump(results, data)
            data.flush()
            subprocess.run(
                [str(venvs.python("plot")), "-m", "bench.peers.chart", data.name, str(chart)],
                cwd=ROOT,
                check=True,
                timeout=300,
                env=dict(os.environ, PYTHONPATH=str(ROOT), MPLBACKEND="Agg"),
            )
    except (OSError, subprocess.SubprocessError) as exc:
        log(f"chart not drawn: {exc}")
    doc_path.parent.mkdir(parents=True, exist_ok=True)
    doc_path.write_text(report.document(results, chart_name=chart.name))
    log(f"wrote {doc_path}")


if __name__ == "__main__":
    main()
