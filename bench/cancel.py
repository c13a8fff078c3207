"""Measure cancelling a running job on the real workerd: the time from the request
(``cancel.lua``, what ``POST /jobs/<id>/cancel`` runs) to the job being ``canceled``.

Three handlers (tests/workerd/handlers_cancel.py): one that asks ``job.cancel_requested()``
every 10 ms and returns (cooperative), one sleeping in a Python loop that the cancel's SIGTERM
interrupts, and one that swallows JobCanceled, so only the SIGKILL after WORKER_CANCEL_GRACE
stops it. TASK_VISIBILITY_TIMEOUT sets how often leases are renewed, and so how soon the
supervisor hears of a request: min(1 s, timeout / 4).

Run from the repository root: ``.venv/bin/python -m bench.cancel`` (``--help``).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import redis

from shared.engine.keys import Keys
from shared.engine.queries import get_job
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, validate_enqueue
from tests.support.redis_server import private_redis
from tests.support.tools import free_port, wait_until
from tests.support.workerd import start_workerd, stop_all

KINDS = {"cooperative": "cancel_polite", "sigterm": "cancel_sleeper", "sigkill": "cancel_stubborn"}


def measure(scripts: Scripts, notes: Path, job_type: str, timeout: float) -> float:
    """Run one job of `job_type`, cancel it once started; return request → canceled (s)."""
    job_id = str(uuid.uuid4())
    body = {"type": job_type, "payload": {"file": str(notes), "seconds": 60}}
    scripts.enqueue(validate_enqueue(body), job_id)
    wait_until(lambda: job_id in notes.read_text() if notes.exists() else False, 10, "start")
    # Renewals come once a second; a request right after a job starts would fall at the same
    # point of that cycle every round (each round starts just after the last one's renewal).
    time.sleep(random.uniform(0, 1))
    asked = time.monotonic()
    scripts.cancel(job_id, by="bench")

    def canceled() -> bool:
        job = get_job(scripts.redis, scripts.keys, job_id)
        return job is not None and job.status is JobState.CANCELED

    wait_until(canceled, timeout, f"{job_id} canceled", interval=0.005)
    return time.monotonic() - asked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="jobs per handler kind")
    parser.add_argument("--visibility", default="30s", help="TASK_VISIBILITY_TIMEOUT")
    parser.add_argument("--grace", default="5s", help="WORKER_CANCEL_GRACE")
    args = parser.parse_args()
    with private_redis() as server, tempfile.TemporaryDirectory(prefix="tf-cancel-") as tmp:
        settings = {
            "REDIS_URL": server.url,
            "WORKER_COUNT": "1",
            "PORT_WORKER": str(free_port()),
            "TASK_VISIBILITY_TIMEOUT": args.visibility,
            "WORKER_CANCEL_GRACE": args.grace,
            "TASKFORGE_HANDLERS": "tests.workerd.handlers_cancel",
            "LOG_LEVEL": "WARNING",
        }
        supervisor = start_workerd(settings, Path(tmp) / "out.log", Path(tmp) / "err.log")
        try:
            scripts = Scripts(redis.Redis.from_url(server.url), Keys())
            figures = {}
            for kind, job_type in KINDS.items():
                times = [
                    measure(scripts, Path(tmp) / f"{kind}{n}.jsonl", job_type, 30)
                    for n in range(args.rounds)
                ]
                figures[kind] = {
                    "median_ms": round(statistics.median(times) * 1000),
                    "min_ms": round(min(times) * 1000),
                    "max_ms": round(max(times) * 1000),
                }
        finally:
            stop_all([supervisor])
    print(json.dumps({"visibility": args.visibility, "grace": args.grace, **figures}, indent=2))


if __name__ == "__main__":
    main()
