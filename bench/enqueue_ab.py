"""POST /enqueue before → after: two checkouts through real gunicorn, in interleaved rounds.

    .venv/bin/python -m bench.enqueue_ab --before /path/to/main-checkout --rounds 6

Each round measures both sides (their order alternating), each on its own code: a private
Redis, the side's gateway under gunicorn, bench.gateway's single-enqueue load. Prints, per
figure, each side's mean and the mean of the paired differences (after vs before, in %) with
its 95 % interval (Student's t over the rounds): pairing cancels the machine's drift between
rounds, which on a shared machine is larger than the effect measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

# The 0.975 quantile of Student's t by degrees of freedom (rounds - 1).
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306}
T_975 |= {9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 14: 2.145, 19: 2.093}

ONE_SIDE = """
import json, sys
from bench.gateway import gunicorn, measure_single
from tests.support.redis_server import private_redis
# One gunicorn worker process: with two, the clients' keep-alive connections were shared
# between them by the kernel's accept race, and a round where one process held most of them
# ran at half the rate and 1.6 x the CPU per request (32 threads contending for one GIL) on
# either side alike: a lottery larger than the effect measured. No max_requests recycling
# either (a replacement's boot mid-round is not the code's cost).
with (
    private_redis() as server,
    gunicorn(server.url, "--max-requests", "0", workers={workers}) as gw,
):
    measure_single(gw, 1.0, {clients})  # warm-up
    rate, cpu, _ = measure_single(gw, {seconds}, {clients})
print(json.dumps({{"requests_per_s": rate, "worker_cpu_us": cpu}}))
"""


def measure(tree: Path, seconds: float, clients: int, workers: int = 1) -> dict[str, float]:
    """Return one side's figures, measured on its own code (its directory first on the path)."""
    code = ONE_SIDE.format(seconds=seconds, clients=clients, workers=workers)
    env = {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin:/usr/local/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:  # say why: a round that fails is the first thing to understand
        raise RuntimeError(f"{tree}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def interval(before: list[float], after: list[float]) -> tuple[float, float, float]:
    """Return the mean paired difference in % of before, and its 95 % interval."""
    diffs = [100 * (a - b) / b for b, a in zip(before, after, strict=True)]
    mean = statistics.mean(diffs)
    half = T_975[max(k for k in T_975 if k <= len(diffs) - 1)] * statistics.stdev(diffs)
    half /= len(diffs) ** 0.5
    return mean, mean - half, mean + half


def main() -> None:
    """Measure both sides in interleaved rounds; print the table (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="a checkout (directory)")
    parser.add_argument("--after", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument(
        "--gunicorn-workers", type=int, default=1, help="gunicorn worker processes per side (1)"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    sides = {"before": args.before.resolve(), "after": args.after.resolve()}
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for n in range(args.rounds):
        for name in ("before", "after") if n % 2 == 0 else ("after", "before"):
            runs[name].append(
                measure(sides[name], args.seconds, args.clients, args.gunicorn_workers)
            )
            print(f"round {n + 1} {name}: {runs[name][-1]}", flush=True)
    print("\n| figure | before (mean) | after (mean) | after − before, mean [95 % interval] |")
    print("|---|---:|---:|---:|")
    for figure in ("requests_per_s", "worker_cpu_us"):
        before = [r[figure] for r in runs["before"]]
        after = [r[figure] for r in runs["after"]]
        mean, low, high = interval(before, after)
        print(
            f"| {figure} | {statistics.mean(before):,.1f} | {statistics.mean(after):,.1f} "
            f"| {mean:+.1f} % [{low:+.1f}, {high:+.1f}] |"
        )
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
