"""Memory of a workerd host by WORKER_THREADS: PSS of the supervisor and all its children.

    .venv/bin/python -m bench.threads_memory                    # 1, 2, 4, 8 threads, 4 workers
    .venv/bin/python -m bench.threads_memory --threads 1 8 --workers 2 --jobs 400

For each thread count: a private redis-server and a real ``python -m workerd`` (WORKER_COUNT
processes × WORKER_THREADS threads); PSS (bench.peers.pss: shared pages charged once) summed
over the host's process tree once it is ready and idle, then sampled through a drain of
`--jobs` jobs that each wait 20 ms (every thread busy), the peak kept. Prints one JSON line
per count.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid

import redis

from bench.peers.pss import Sampler, tree_pss_kib
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, validate_enqueue
from tests.support.redis_server import private_redis
from tests.support.tools import free_port, wait_until
from tests.support.workerd import running_workerd

IDLE_SETTLE = 2.0  # seconds after /ready before the idle sample (children past their start)


def host_pss_mb(pid: int) -> float:
    """Return the PSS of a process and its descendants, in MB."""
    return tree_pss_kib([pid])[0] / 1024


def measure(threads: int, workers: int, jobs: int) -> dict[str, object]:
    with private_redis() as server:
        settings = {
            "REDIS_URL": server.url,
            "PORT_WORKER": str(free_port()),
            "TASKFORGE_BIND_HOST": "127.0.0.1",
            "TASKFORGE_HANDLERS": "workerd.demo",
            "WORKER_COUNT": str(workers),
            "WORKER_THREADS": str(threads),
            "LOG_LEVEL": "WARNING",
        }
        with running_workerd(settings, "taskforge-threads-memory-") as host:
            client = redis.Redis.from_url(server.url)
            time.sleep(IDLE_SETTLE)  # a measurement condition, not a synchronisation
            idle = host_pss_mb(host.pid)
            scripts = Scripts(client, Keys())
            body = validate_enqueue({"type": "demo.sleep", "payload": {"seconds": 0.02}})
            ids = [str(uuid.uuid4()) for _ in range(jobs)]
            sampler = Sampler(lambda: [host.pid]).start()
            scripts.enqueue_many([(body, job_id) for job_id in ids])

            def drained() -> bool:
                return all(
                    raw is not None and raw.decode() == JobState.COMPLETED
                    for raw in (client.hget(Keys().job(i), "status") for i in ids[-threads:])
                )

            wait_until(drained, 120, "the drain")
            busy = sampler.stop()
            return {
                "threads": threads,
                "workers": workers,
                "idle_pss_mb": round(idle, 1),
                "busy_peak_pss_mb": busy["pss_mb"],
                "processes": busy["pss_processes"],
            }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=1000)
    args = parser.parse_args()
    for threads in args.threads:
        print(json.dumps(measure(threads, args.workers, args.jobs)), flush=True)


if __name__ == "__main__":
    main()
