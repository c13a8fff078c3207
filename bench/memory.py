"""Measure the Redis memory a pending and a finished job cost, with the encodings Redis chose.

Enqueues N jobs (a 40-byte JSON payload) through the real enqueue script on a private
redis-server, then drains them as a worker does (complete claiming the next, a small JSON
result). Black-box figures are INFO ``used_memory`` deltas divided by N; the breakdown comes
from MEMORY USAGE of one job hash and of each index, and from what PERSIST gives back (the
per-key TTL). Run from the repository root: ``.venv/bin/python -m bench.memory`` (``--help``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

import redis

from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import dump_json, validate_enqueue
from tests.support.redis_server import private_redis

PAYLOAD = {"to": "ada@example.org", "template": "hi"}  # 40 bytes of JSON, the size
RESULT = {"delivered": True}  # what the demo send_email handler returns
BATCH = 1_000  # jobs per enqueue transaction and per pipelined read
PENDING_INDEXES = ("pending", "pending_since")
FINISHED_INDEXES = ("completed",)


@dataclass
class Stage:
    """What one stage (every job pending, or every job finished) costs, in bytes per job."""

    black_box: float
    hash_usage: int
    hash_encoding: str
    hash_fields: int
    indexes: dict[str, float] = field(default_factory=dict)
    index_encodings: dict[str, str] = field(default_factory=dict)
    expire: float = 0.0
    redis_cpu_us: float = 0.0  # Redis CPU per job to get here: enqueue, or the drain

    @property
    def rest(self) -> float:
        """Bytes per job not in the hash, the indexes or the TTL: the keyspace's tables."""
        return self.black_box - self.hash_usage - sum(self.indexes.values()) - self.expire


def used_memory(client: redis.Redis) -> int:
    """Return INFO memory used_memory: every byte Redis allocated."""
    return int(client.info("memory")["used_memory"])


def redis_cpu(client: redis.Redis) -> float:
    """Return the CPU seconds Redis has used (user + system)."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def index_costs(
    client: redis.Redis, keys: Keys, names: tuple[str, ...], jobs: int
) -> tuple[dict[str, float], dict[str, str]]:
    """Return MEMORY USAGE per job and the encoding of each index."""
    costs, encodings = {}, {}
    for name in names:
        key = keys.state_index(name)
        costs[name] = (client.memory_usage(key, samples=0) or 0) / jobs
        encodings[name] = (client.object("encoding", key) or b"(absent)").decode()
    return costs, encodings


def stage(
    client: redis.Redis,
    keys: Keys,
    job_id: str,
    before: int,
    jobs: int,
    indexes: tuple[str, ...],
) -> Stage:
    """Measure the current state against `before` (used_memory with no job)."""
    black_box = (used_memory(client) - before) / jobs
    job_key = keys.job(job_id)
    costs, encodings = index_costs(client, keys, indexes, jobs)
    return Stage(
        black_box=black_box,
        hash_usage=client.memory_usage(job_key, samples=0) or 0,
        hash_encoding=client.object("encoding", job_key).decode(),
        hash_fields=client.hlen(job_key),
        indexes=costs,
        index_encodings=encodings,
    )


def expire_cost(client: redis.Redis, keys: Keys, ids: list[str]) -> float:
    """Return the bytes per job that its TTL costs: what PERSIST of every job hash gives back.

    Destructive (the TTLs are gone afterwards): the last measurement of a run.
    """
    before = used_memory(client)
    for start in range(0, len(ids), BATCH):
        pipe = client.pipeline(transaction=False)
        for job_id in ids[start : start + BATCH]:
            pipe.persist(keys.job(job_id))
        pipe.execute()
    return (before - used_memory(client)) / len(ids)


def payload(size: int) -> dict[str, str]:
    """Return the benchmark's payload padded to `size` bytes of JSON (40: the issue's)."""
    base = len(dump_json(PAYLOAD))
    if size < base:
        raise SystemExit(f"--payload-bytes must be at least {base}")
    return {**PAYLOAD, "template": PAYLOAD["template"] + "x" * (size - base)}


def enqueue_all(scripts: Scripts, ids: list[str], size: int) -> None:
    """Enqueue every id with a `size`-byte payload, no trace context, as the gateway does."""
    request = validate_enqueue({"type": "send_email", "payload": payload(size)})
    for start in range(0, len(ids), BATCH):
        scripts.enqueue_many([(request, job_id) for job_id in ids[start : start + BATCH]])


def drain_all(scripts: Scripts, worker_id: str) -> int:
    """Claim and complete every pending job as one worker does; return how many it finished."""
    result = dump_json(RESULT)
    finished = 0
    job = scripts.claim(worker_id)
    while job is not None:
        job = scripts.complete(job.id, job.token, result, claim_next_for=worker_id).next_job
        finished += 1
    return finished


def measure(jobs: int, size: int, config: dict[str, str]) -> dict[str, Stage]:
    """Run both stages on a fresh private redis-server (with `config`); return their figures."""
    keys = Keys()
    with private_redis(**config) as server:
        client = server.client()
        scripts = Scripts(client, keys)
        scripts.load()
        ids = [str(uuid.uuid4()) for _ in range(jobs)]
        before, cpu = used_memory(client), redis_cpu(client)
        enqueue_all(scripts, ids, size)
        enqueued_cpu = redis_cpu(client)
        pending = stage(client, keys, ids[-1], before, jobs, PENDING_INDEXES)
        pending.redis_cpu_us = (enqueued_cpu - cpu) * 1e6 / jobs
        worker_id = f"{socket.gethostname()}-{os.getpid()}-worker0-1"  # as workerd names one
        cpu = redis_cpu(client)
        if drain_all(scripts, worker_id) != jobs:
            raise RuntimeError("the drain did not finish every job")
        drained_cpu = redis_cpu(client)
        client.delete(keys.last_claim(worker_id))  # per worker, not per job
        finished = stage(client, keys, ids[-1], before, jobs, FINISHED_INDEXES)
        finished.redis_cpu_us = (drained_cpu - cpu) * 1e6 / jobs
        if client.pttl(keys.job(ids[-1])) > 0:
            finished.expire = expire_cost(client, keys, ids)
        client.close()
    return {"pending": pending, "finished": finished}


def canceled_cost(jobs: int, size: int, config: dict[str, str]) -> float:
    """Return black-box bytes per canceled job: `jobs` pending jobs canceled, on a new server."""
    with private_redis(**config) as server:
        client = server.client()
        scripts = Scripts(client, Keys())
        scripts.load()
        ids = [str(uuid.uuid4()) for _ in range(jobs)]
        before = used_memory(client)
        enqueue_all(scripts, ids, size)
        for job_id in ids:
            scripts.cancel(job_id)
        cost = (used_memory(client) - before) / jobs
        client.close()
    return cost


# Finished-job layouts written directly (no script), each on a fresh server: what the levers
# left out would save, and what the ones taken saved. worker_id: a container's 12-character
# host name, a pid, the worker slot and generation, as workerd names its workers.
WORKER_ID = "3f9c2a7b1d0e-48213-worker0-1"
LEVERS = {
    "as stored now: zset index, no TTL": ({}, (), "zset", False),
    "+ TTL (before)": ({}, (), "zset", True),
    "+ TTL, id, seq, worker_id (before)": (
        {"id": "", "seq": "48213", "worker_id": WORKER_ID},
        (),
        "zset",
        True,
    ),
    "+ id": ({"id": ""}, (), "zset", False),
    "index as a list (RPUSH id, not done)": ({}, (), "list", False),
    "list, without updated_at (not done)": ({}, ("updated_at",), "list", False),
    "list, without updated_at, priority, max_retries, recoveries (not done)": (
        {},
        ("updated_at", "priority", "max_retries", "recoveries"),
        "list",
        False,
    ),
}


def completed_fields(size: int) -> dict[str, str]:
    """Return the fields complete.lua leaves in a finished job's hash (one real run)."""
    keys = Keys()
    with private_redis() as server:
        client = server.client()
        scripts = Scripts(client, keys)
        job_id = str(uuid.uuid4())
        enqueue_all(scripts, [job_id], size)
        drain_all(scripts, WORKER_ID)
        fields = {k.decode(): v.decode() for k, v in client.hgetall(keys.job(job_id)).items()}
        client.close()
    return fields


def lever_costs(jobs: int, size: int) -> dict[str, float]:
    """Return black-box bytes per finished job for each layout of LEVERS."""
    keys, template = Keys(), completed_fields(size)
    costs = {}
    for name, (extra, without, index, ttl) in LEVERS.items():
        fields = {k: v for k, v in template.items() if k not in without}
        with private_redis() as server:
            client = server.client()
            before = used_memory(client)
            for start in range(0, jobs, BATCH):
                pipe = client.pipeline(transaction=False)
                for n in range(start, min(start + BATCH, jobs)):
                    job_id = str(uuid.uuid4())
                    pipe.hset(
                        keys.job(job_id), mapping={**fields, **extra} | _own_id(extra, job_id)
                    )
                    if ttl:
                        pipe.pexpire(keys.job(job_id), 86_400_000)
                    if index == "zset":
                        pipe.zadd(keys.completed, {job_id: 1_800_000_000_000 + n})
                    else:
                        pipe.rpush(keys.completed, job_id)
                pipe.execute()
            costs[name] = (used_memory(client) - before) / jobs
            client.close()
    return costs


def _own_id(extra: dict[str, str], job_id: str) -> dict[str, str]:
    return {"id": job_id} if "id" in extra else {}


def report(stages: dict[str, Stage], jobs: int, size: int) -> str:
    """Return the table of bytes per job."""
    pending, finished = stages["pending"], stages["finished"]
    lines = [
        f"{jobs:,} jobs, {size}-byte payload, result {dump_json(RESULT)}; bytes per job",
        f"{'':50}{'pending':>10}{'finished':>10}",
        f"{'black box (INFO used_memory)':50}{pending.black_box:>10.0f}{finished.black_box:>10.0f}",
    ]

    def row(label: str, a: float | None, b: float | None) -> None:
        cells = "".join(f"{'-' if v is None else f'{v:.0f}':>10}" for v in (a, b))
        lines.append(f"  {label:48}{cells}")

    encodings = f"{pending.hash_encoding}/{finished.hash_encoding}"
    fields = f"{pending.hash_fields}/{finished.hash_fields} fields"
    row(f"job hash + key ({encodings}, {fields})", pending.hash_usage, finished.hash_usage)
    for name in (*PENDING_INDEXES, *FINISHED_INDEXES):
        encoding = pending.index_encodings.get(name) or finished.index_encodings.get(name)
        row(f"index {name} ({encoding})", pending.indexes.get(name), finished.indexes.get(name))
    row("TTL (expires entry; 0: none)", None, finished.expire)
    row("keyspace tables, rest", pending.rest, finished.rest)
    row("Redis CPU µs per job (enqueue; drain)", pending.redis_cpu_us, finished.redis_cpu_us)
    return "\n".join(lines)


def main() -> None:
    """Measure and print the table (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--payload-bytes", type=int, default=40, help="JSON size of the payload")
    parser.add_argument(
        "--redis-config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a redis-server setting, e.g. hash-max-listpack-value=256 (repeatable)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--levers", action="store_true", help="also measure other finished-job layouts"
    )
    args = parser.parse_args()
    if args.levers:
        print(f"finished-job layouts, {args.jobs:,} jobs, bytes per job (INFO used_memory)")
        for name, cost in lever_costs(args.jobs, args.payload_bytes).items():
            print(f"  {name:72}{cost:>6.0f}")
    config = dict(item.split("=", 1) for item in args.redis_config)
    stages = measure(args.jobs, args.payload_bytes, config)
    if config:
        print("redis-server " + " ".join(f"--{k} {v}" for k, v in config.items()))
    print(report(stages, args.jobs, args.payload_bytes))
    canceled = canceled_cost(args.jobs, args.payload_bytes, config)
    print(f"{'canceled (pending jobs canceled), black box':60}{canceled:>10.0f}")
    if args.json:
        figures: dict[str, object] = {n: {**asdict(s), "rest": s.rest} for n, s in stages.items()}
        figures["canceled_black_box"] = canceled
        meta = {"jobs": args.jobs, "payload_bytes": args.payload_bytes, "redis_config": config}
        args.json.write_text(json.dumps({**meta, **figures}, indent=2) + "\n")


if __name__ == "__main__":
    main()
