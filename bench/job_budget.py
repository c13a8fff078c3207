"""Redis's cost of one job, call by call: enqueue through the gateway, claim, complete.

The per-job budget of bench/PER_JOB_COST.md comes from here. For each checkout (``--tree``,
default this one), on one private redis-server, in interleaved rounds, a probe process run
with that checkout's code on its path:

1. enqueues ``--jobs`` jobs through the gateway (``POST /enqueue`` on its Flask app, in
   process: Redis sees what gunicorn's workers send), without an Idempotency-Key;
2. drains them as a busy worker does: one claim, then complete-and-claim-next until the queue
   is empty (the last complete finds nothing to claim).

Around each phase it reads ``INFO`` and reports per job: Redis CPU µs (used_cpu_sys +
used_cpu_user), the commands the scripts ran by name with their usec (``INFO commandstats``;
a script call's own usec includes its commands'), the script calls' usec, and the bytes
Redis read and wrote on the wire (``total_net_input_bytes`` / ``..._output_bytes``). The
probe's own INFO calls are subtracted. Commands and bytes are exact and repeat from run to run
(tests/engine/test_budgets.py holds them); CPU swings with the machine's load: read medians of
rounds measured in one sitting. ``--events off`` is TASKFORGE_EVENTS=off; ``--history off``
measures the scripts with history entries made empty (a bench-only variant: the field is still
read and written, its entries are not built), to say what history costs. ``--batch N``: the
worker claims N jobs a call (claim_batch) and completes each apart, claiming nothing.

    .venv/bin/python -m bench.job_budget                                 # this checkout
    .venv/bin/python -m bench.job_budget --tree /tmp/rediscost-before --tree . --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE_TIMEOUT = 900.0
WORKER = "bench-host-123456-worker0-1"  # a worker id of a realistic length (host, pid, slot)
PAYLOAD = '{"to": "user@example.com", "n": 1}'


# --- the probe: runs inside the measured checkout (its shared/ and gateway/ on sys.path) ---


def snapshot(client) -> dict:  # type: ignore[no-untyped-def]
    """Return the INFO counters a phase's cost is computed from."""
    info = client.info("all")
    stats = {k[8:]: v for k, v in info.items() if k.startswith("cmdstat_")}
    return {
        "cpu": info["used_cpu_sys"] + info["used_cpu_user"],
        "in": info["total_net_input_bytes"],
        "out": info["total_net_output_bytes"],
        "calls": {name: v["calls"] for name, v in stats.items()},
        "usec": {name: v["usec"] for name, v in stats.items()},
    }


def instructions() -> float | None:
    """Return the Redis instructions counted since the last call (under callgrind, else None).

    The controller runs the server under callgrind (bench/instructions.py) and names it in
    BENCH_CALLGRIND_PID / BENCH_CALLGRIND_DIR; counting is on from the first call.
    """
    pid, where = os.environ.get("BENCH_CALLGRIND_PID"), os.environ.get("BENCH_CALLGRIND_DIR")
    if not pid or not where:
        return None
    dumps = set(Path(where).glob("callgrind.out*"))
    subprocess.run(["callgrind_control", "--dump", pid], check=True, capture_output=True)
    (new,) = set(Path(where).glob("callgrind.out*")) - dumps
    found = re.search(rb"^totals: (\d+)$", new.read_bytes(), re.MULTILINE)
    if found is None:
        raise RuntimeError(f"no totals in {new}")
    subprocess.run(["callgrind_control", "-i", "on", pid], check=True, capture_output=True)
    return float(found.group(1))


def phase_cost(before: dict, after: dict, jobs: int, info_out: int) -> dict:
    """Return the cost per job between two snapshots (the second snapshot's INFO left out)."""
    calls = {n: c - before["calls"].get(n, 0) for n, c in after["calls"].items()}
    usec = {n: u - before["usec"].get(n, 0) for n, u in after["usec"].items()}
    calls["info"] = calls.get("info", 0) - 1
    usec.pop("info", None)
    return {
        "cpu_us": (after["cpu"] - before["cpu"]) * 1e6 / jobs,
        "bytes_in": (after["in"] - before["in"] - len(b"*2\r\n$4\r\ninfo\r\n$3\r\nall\r\n")) / jobs,
        "bytes_out": (after["out"] - before["out"] - info_out) / jobs,
        "calls": {n: c / jobs for n, c in sorted(calls.items()) if c > 0},
        "usec": {n: u / jobs for n, u in sorted(usec.items()) if u > 0},
    }


def history_off(lua: str) -> str:
    """Return a script whose history entries are empty (bench only: what history costs)."""
    head = "local function history_add(history, code, created, now, attempt, worker, error_type)\n"
    return lua.replace(head, head + "  do return '' end\n")


def probe(url: str, jobs: int, events: str, history: str, batch: int = 1) -> dict:
    """Enqueue `jobs` through the gateway, drain them as a worker; return each phase's cost.

    `batch` > 1: the worker claims with claim_batch (that many a call) and completes each job
    without claiming (a checkout from before claim_batch cannot run it).
    """
    import redis

    from gateway.app import create_app
    from shared.engine.engine_types import Policy
    from shared.engine.keys import Keys
    from shared.engine.scripts import Scripts
    from shared.settings.config import Settings

    class Engine(Scripts):
        def _source(self, name: str) -> str:
            text = super()._source(name)
            return history_off(text) if history == "off" else text

    settings = Settings.from_env({"REDIS_URL": url, "TASKFORGE_EVENTS": events})
    client = redis.Redis.from_url(url)
    client.flushall()
    scripts = Engine(client, Keys(settings.namespace), Policy.from_settings(settings))
    scripts.load()
    app = create_app(settings, scripts=scripts).test_client()
    body = json.dumps({"type": "send_email", "payload": json.loads(PAYLOAD)})
    # A first job: the queue's first enqueue lists it (once per queue, not per job).
    assert app.post("/enqueue", data=body, content_type="application/json").status_code == 201
    scripts.complete(*_first(scripts), claim_next_for=None)
    first = snapshot(client)
    # One INFO reply's bytes (its size moves by a few bytes from one to the next).
    info_out = snapshot(client)["out"] - first["out"]
    out: dict = {}
    instructions()
    before = snapshot(client)
    for _ in range(jobs):
        reply = app.post("/enqueue", data=body, content_type="application/json")
        assert reply.status_code == 201, reply.data
    out["enqueue"] = phase_cost(before, snapshot(client), jobs, info_out)
    out["enqueue"]["instructions"] = _per(instructions(), jobs)
    before = snapshot(client)
    done = drain_batched(scripts, batch) if batch > 1 else drain(scripts)
    out["worker"] = phase_cost(before, snapshot(client), jobs, info_out)
    out["worker"]["instructions"] = _per(instructions(), jobs)
    if done != jobs:
        raise RuntimeError(f"drained {done} of {jobs}")
    return out


def drain(scripts) -> int:  # type: ignore[no-untyped-def]
    """Drain as a busy worker does today: a claim, then complete-and-claim-next."""
    job = scripts.claim(WORKER)
    done = 0
    while job is not None:
        job = scripts.complete(job.id, job.token, '{"sent": true}', claim_next_for=WORKER).next_job
        done += 1
    return done


def drain_batched(scripts, batch: int) -> int:  # type: ignore[no-untyped-def]
    """Drain with claim_batch (`batch` jobs a call), then a complete of each, claiming nothing."""
    done = 0
    while jobs := scripts.claim_batch(WORKER, batch):
        for job in jobs:
            scripts.complete(job.id, job.token, '{"sent": true}')
            done += 1
    return done


def _per(count: float | None, jobs: int) -> float | None:
    return None if count is None else count / jobs


def _first(scripts):  # type: ignore[no-untyped-def]
    job = scripts.claim(WORKER)
    return job.id, job.token


# --- the controller: this checkout's environment ---


def run_probe(
    tree: Path, url: str, jobs: int, events: str, history: str, extra: dict[str, str] | None = None
) -> dict:
    """Run the probe with `tree`'s code; return its figures."""
    from bench.peers.harness import run_json

    env = {**os.environ, "PYTHONPATH": str(tree.resolve()), "LOG_LEVEL": "WARNING", **(extra or {})}
    argv = [sys.executable, __file__, "--probe", url, str(jobs), events, history]
    return run_json(argv, tree, env, PROBE_TIMEOUT, f"probe in {tree}")


def count_instructions(
    tree: Path, jobs: int, events: str, history: str, extra: dict[str, str]
) -> dict[str, float]:
    """Return Redis's instructions per job of each phase of `tree`'s code, under callgrind."""
    import tempfile

    from bench.instructions import CallgrindRedis
    from tests.support.redis_server import NO_PERSISTENCE, redis_binary

    with tempfile.TemporaryDirectory(prefix="taskforge-callgrind-") as tmp:
        server = CallgrindRedis(redis_binary(), Path(tmp), dict(NO_PERSISTENCE))
        server.start()
        try:
            counting = {"BENCH_CALLGRIND_PID": str(server.pid), "BENCH_CALLGRIND_DIR": tmp}
            run = run_probe(tree, server.url, jobs, events, history, {**extra, **counting})
        finally:
            server.close()
    return {phase: run[phase]["instructions"] for phase in ("enqueue", "worker")}


def median(values: list[float]) -> str:
    """Return 'median (min–max)' of a figure over rounds."""

    def fmt(v: float) -> str:
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.1f}"

    mid = statistics.median(values)
    if len(values) == 1:
        return fmt(mid)
    return f"{fmt(mid)} ({fmt(min(values))}–{fmt(max(values))})"


def total(run: dict, key: str) -> float:
    return run["enqueue"][key] + run["worker"][key]


def report(runs: dict[str, list[dict]]) -> str:
    """Return the per-job table: one column per checkout, medians of rounds."""
    names = list(runs)
    rows = [
        ("Redis CPU µs, enqueue (gateway)", lambda r: r["enqueue"]["cpu_us"]),
        ("Redis CPU µs, worker (claim + complete)", lambda r: r["worker"]["cpu_us"]),
        ("Redis CPU µs, total", lambda r: total(r, "cpu_us")),
        ("· scripts' usec (commandstats)", lambda r: _script_usec(r)),
        ("· · their commands' usec", lambda r: _command_usec(r)),
        ("Redis commands, enqueue", lambda r: sum(r["enqueue"]["calls"].values())),
        ("Redis commands, worker", lambda r: sum(r["worker"]["calls"].values())),
        ("Redis instructions (callgrind), enqueue", lambda r: _instr(r, "enqueue")),
        ("Redis instructions (callgrind), worker", lambda r: _instr(r, "worker")),
        (
            "bytes in + out on the wire, total",
            lambda r: total(r, "bytes_in") + total(r, "bytes_out"),
        ),
    ]
    lines = ["| per job | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for label, get in rows:
        lines.append(
            f"| {label} | " + " | ".join(median([get(r) for r in runs[n]]) for n in names) + " |"
        )
    return "\n".join(lines)


SCRIPT_CALLS = ("evalsha", "eval", "fcall")


def _instr(run: dict, phase: str) -> float:
    return run.get("instructions", {}).get(phase, float("nan"))


def _script_usec(run: dict) -> float:
    return sum(run[p]["usec"].get(n, 0.0) for p in ("enqueue", "worker") for n in SCRIPT_CALLS)


def _command_usec(run: dict) -> float:
    return sum(
        u
        for p in ("enqueue", "worker")
        for n, u in run[p]["usec"].items()
        if n not in SCRIPT_CALLS and not n.startswith(("client", "config", "hello", "script"))
    )


def breakdown(runs: dict[str, list[dict]]) -> str:
    """Return commands and usec per job by command and phase, medians, for each checkout."""
    lines = []
    for name, rounds in runs.items():
        lines += [f"\n{name}: calls / usec per job, by command", ""]
        lines += ["| phase | command | calls | usec | usec per call |", "|---|---|---|---|---|"]
        for phase in ("enqueue", "worker"):
            commands = sorted({c for r in rounds for c in r[phase]["calls"]})
            for c in commands:
                calls = statistics.median(r[phase]["calls"].get(c, 0.0) for r in rounds)
                usec = statistics.median(r[phase]["usec"].get(c, 0.0) for r in rounds)
                per = usec / calls if calls else 0.0
                lines.append(f"| {phase} | {c} | {calls:.3f} | {usec:.2f} | {per:.2f} |")
    return "\n".join(lines)


def main() -> None:
    """Measure every checkout in interleaved rounds and print the tables (JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, action="append", help="checkout (repeatable)")
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", choices=("on", "off"), default="on")
    parser.add_argument("--history", choices=("on", "off"), default="on")
    parser.add_argument(
        "--callgrind",
        type=int,
        default=0,
        metavar="JOBS",
        help="also count Redis's instructions per job under callgrind, with JOBS jobs",
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=1,
        help="the worker claims this many jobs a call (claim_batch) and completes each apart",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    extra = {"BENCH_CLAIM_BATCH": str(args.batch)}
    sys.path.insert(0, str(ROOT))
    from tests.support.redis_server import private_redis

    trees = args.tree or [ROOT]
    labels = [_label(t) for t in trees]
    runs: dict[str, list[dict]] = {label: [] for label in labels}
    with private_redis() as server:
        for round_no in range(args.rounds):
            for tree, label in zip(trees, labels, strict=True):
                runs[label].append(
                    run_probe(tree, server.url, args.jobs, args.events, args.history, extra)
                )
                print(
                    f"round {round_no + 1}, {label}: done (load {os.getloadavg()[0]:.1f})",
                    file=sys.stderr,
                )
    if args.callgrind:
        for tree, label in zip(trees, labels, strict=True):
            counted = count_instructions(tree, args.callgrind, args.events, args.history, extra)
            for run in runs[label]:
                run["instructions"] = counted
    print(
        f"{args.jobs:,} jobs, events {args.events}, history {args.history}, "
        f"{args.rounds} round(s), median (min–max)\n"
    )
    print(report(runs))
    print(breakdown(runs))
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1) + "\n")


def _label(tree: Path) -> str:
    """Return a checkout's label: its commit, + when it has uncommitted changes."""
    git = ["git", "-C", str(tree)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run([*git, "status", "--porcelain", "-uno"], capture_output=True, text=True)
    return (
        head.stdout.strip() + ("+" if dirty.stdout.strip() else "")
        if head.returncode == 0
        else tree.name
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        sys.path.pop(0)  # bench/ itself: its modules must not shadow the checkout's
        url, jobs, events, history = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
        batch = int(os.environ.get("BENCH_CLAIM_BATCH", "1"))
        print(json.dumps(probe(url, jobs, events, history, batch)))
    else:
        main()
