"""Schemathesis over several seeds, with more examples and time than the suite's run
(tests/gateway/test_schemathesis.py): every phase against real gunicorn and a live workerd
host, open or with a token, each seed on a fresh private Redis; prints what each seed found.

Run from the repository root: ``.venv/bin/python -m bench.schemathesis_wide`` (``--help``).
A seed's failures reproduce with the suite's settings and that seed; its output is kept
with ``--keep DIR``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import redis

from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from tests.gateway.conftest import TOKEN
from tests.support.gunicorn import run_gunicorn
from tests.support.redis_server import private_redis
from tests.support.schemathesis_run import Run, live_fleet, run_schemathesis, seed_examples


def run_seed(seed: int, examples: int, seconds: int | None, token: bool) -> Run:
    """Run every phase once with `seed` on a fresh Redis, gateway and workerd host."""
    env = {"TASKFORGE_API_TOKEN": TOKEN, "TASKFORGE_AUTH_MAX_FAILURES": "1000000"} if token else {}
    headers = [f"Authorization: Bearer {TOKEN}"] if token else []
    with private_redis() as server, tempfile.TemporaryDirectory(prefix="tf-st-wide-") as tmp:
        seed_examples(Scripts(redis.Redis.from_url(server.url), Keys()))
        with (
            run_gunicorn(server.url, Path(tmp), **env) as gw,
            live_fleet(server.url, gw, Path(tmp), *headers),
        ):
            return run_schemathesis(
                gw.url,
                Path(tmp),
                *headers,
                seed=seed,
                examples=examples,
                max_time=seconds,
                timeout=(seconds or 300) * 3,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--examples", type=int, default=50, help="per operation, for fuzzing")
    parser.add_argument(
        "--seconds", type=int, help="a time budget: repeat fuzzing and stateful until spent"
    )
    parser.add_argument("--token", action="store_true", help="a gateway with a token")
    parser.add_argument("--keep", type=Path, help="write each seed's output in this directory")
    args = parser.parse_args()
    results = []
    for seed in args.seeds:
        started = time.monotonic()
        run = run_seed(seed, args.examples, args.seconds, args.token)
        generated, passed = run.requests()
        result = {
            "seed": seed,
            "exit": run.returncode,
            "generated": generated,
            "passed": passed,
            "findings": run.findings(),
            "seconds": round(time.monotonic() - started, 1),
        }
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            (args.keep / f"seed-{seed}.txt").write_text(run.output)
        if run.returncode != 0 and not result["findings"]:  # the tool itself failed
            result["tail"] = run.output[-1500:]
        print(json.dumps(result), flush=True)
        results.append(result)
    failed = [r["seed"] for r in results if r["exit"] != 0]
    print(json.dumps({"seeds": args.seeds, "token": args.token, "failed_seeds": failed}))


if __name__ == "__main__":
    main()
