"""What one enqueue.lua call costs Redis alone, against the same call among a thousand.

The gateway makes one script call per ``POST /enqueue`` and a busy worker one per job; a
batch (``enqueue_many``, a batched worker) shares one request among many calls. This puts a
figure on the difference on this machine: Redis's CPU (``used_cpu_user + used_cpu_sys``) per
``Scripts.enqueue`` on a private redis-server, the calls

- ``back-to-back``: one after another from one client, each awaited;
- ``sleep-<ms>``: each followed by that long asleep (Redis idles between requests, as behind a
  gateway that is not saturated);
- ``batch``: 1,000 to a call of ``Scripts.enqueue_many`` (one MULTI/EXEC request).

    .venv/bin/python -m bench.call_cost --calls 3000 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

import redis

from shared.model.jobs import validate_enqueue
from tests.support.engine_jobs import engine_on
from tests.support.redis_server import private_redis

BATCH = 1_000
SLEEPS_MS = (0.5, 2.0)


def _cpu(client: redis.Redis) -> float:
    info: Any = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def measure(calls: int) -> dict[str, float]:
    """Return Redis CPU µs per enqueue for each way of calling, on a fresh private Redis."""
    request = validate_enqueue({"type": "send_email", "payload": {"to": "ada@example.com"}})
    figures: dict[str, float] = {}
    with private_redis() as server:
        client = server.client()
        scripts = engine_on(client)
        scripts.enqueue(request, str(uuid.uuid4()))  # the script loaded, the queue listed

        def lone(pause: float) -> float:
            before = _cpu(client)
            for _ in range(calls):
                scripts.enqueue(request, str(uuid.uuid4()))
                if pause:
                    time.sleep(pause)
            return (_cpu(client) - before) * 1e6 / calls

        figures["back-to-back"] = lone(0.0)
        for ms in SLEEPS_MS:
            figures[f"sleep-{ms:g}"] = lone(ms / 1000)
        before, done = _cpu(client), 0
        while done < calls:
            size = min(BATCH, calls - done)
            scripts.enqueue_many([(request, str(uuid.uuid4())) for _ in range(size)])
            done += size
        figures["batch"] = (_cpu(client) - before) * 1e6 / calls
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3_000, help="calls per way, per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rounds = [measure(args.calls) for _ in range(args.rounds)]
    print("| Redis CPU µs per enqueue | median (min–max) |")
    print("|---|---|")
    for way in rounds[0]:
        values = [figures[way] for figures in rounds]
        print(f"| {way} | {statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f}) |")


if __name__ == "__main__":
    main()
