"""What a page of ``GET /jobs`` costs with 1,000,000 jobs in Redis, against 1,000.

For each state, N jobs sit in that state's index on a private redis-server; then pages are
read through shared.read.listing.list_jobs (the call the gateway's view makes) and each case is
measured over R reads: the wall time of a page (median, this process to Redis and back, two
round trips), the Redis commands a page runs (INFO commandstats: the script's own commands
counted, its EVALSHA not), and the Redis CPU of a page (commandstats usec of the top-level
calls; a script's usec includes its commands'). Cases: the first page; a deep page (the
cursor at the middle of the index); a page after the cursor's job left (pending: canceled by
the real cancel script, so the script finds the cursor's place with its probe); every state;
three queues of N/3 each; a type filter (1 job in 10 of that type; and a type no job has,
where a page of 50 examines its bound, 500 entries, and returns none); a page of 1,000.

processing holds at most as many jobs as there are live workers, whatever N, and is paged from
its jobs' hashes (shared/read/listing.py): it is measured with 1,000 running jobs at both sizes.

How the jobs are loaded (one to two minutes per million on a busy 2-core machine, instead of
several through three scripts a job): for each state one job is made by the engine's own
scripts (enqueue, claim, complete, fail, cancel), and its hash is the template of N copies
written with HSET (the template's fields; id, type and times varied) and the index entry the
scripts write (ZADD; for pending also pending_since, with a sequence number). So the hashes and
indexes have the engine's shapes; the copies carry no TTL (dead and canceled hashes have one),
which no page reads.
Ties are on purpose: two jobs per millisecond, and pending in five priorities (200,000 jobs
at one score at N = 1,000,000).

    .venv/bin/python -m bench.listing                            # 1,000,000 and 1,000
    .venv/bin/python -m bench.listing --jobs 20000 --small 200 --reads 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path

import redis

from shared.engine.engine_types import Code
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, format_ms, validate_enqueue
from shared.read.listing import Position, list_jobs
from tests.support.redis_server import private_redis

T_BASE = 1_800_000_000_000  # ms: 2027-01-15, after any now the template jobs were made at
FUTURE = 10 * 365 * 86_400_000  # scheduled jobs wait ten years
LEASE_MS = 60_000
TYPES = [f"type{n}" for n in range(10)]
ABSENT_TYPE = "nobody"
RUNNING = 1_000  # running jobs, at every N
BATCH = 5_000  # jobs per pipelined write
QUEUES3 = ("q1", "q2", "q3")
REDIS_CALL = re.compile(r"redis\.p?call\(\s*'([A-Za-z]+)'")
TIME_FIELDS = (b"created_at", b"updated_at", b"started_at", b"finished_at", b"eligible_at")


@dataclass
class Case:
    """One measured page: what it was, on how many jobs, and its cost."""

    name: str
    jobs: int
    page_ms: float  # median wall time of one page
    commands: float  # Redis commands per page (the script's own included)
    redis_us: float  # Redis CPU per page (commandstats usec of the top-level calls)
    listed: int  # jobs on the page


def script_commands() -> set[str]:
    """Return the commands list_page.lua runs (counted inside the EVALSHA's usec)."""
    text = (resources.files("shared.engine") / "lua" / "list_page.lua").read_text()
    return {name.lower() for name in REDIS_CALL.findall(text)}


INNER = script_commands()


def template(client: redis.Redis, keys: Keys, state: JobState) -> dict[bytes, bytes]:
    """Return the hash of one job the engine's scripts put in `state`."""
    scripts = Scripts(client, keys)
    jid = str(uuid.uuid4())
    body = {"type": "t", "payload": {"to": "ada@example.org", "template": "hi"}}
    if state is JobState.SCHEDULED:
        body["scheduled_at"] = format_ms(T_BASE + FUTURE)
    scripts.enqueue(validate_enqueue(body), jid)
    if state is JobState.CANCELED:
        scripts.cancel(jid)
    elif state not in (JobState.PENDING, JobState.SCHEDULED):
        job = scripts.claim("bench-worker")
        assert job is not None and job.id == jid
        if state is JobState.COMPLETED:
            scripts.complete(jid, job.token, '{"delivered": true}')
        elif state in (JobState.RETRYING, JobState.DEAD):
            result = scripts.fail(jid, job.token, "Boom: x", permanent=state is JobState.DEAD)
            assert result.code is (Code.DEAD if state is JobState.DEAD else Code.RETRYING)
    raw = client.hgetall(keys.job(jid))
    assert raw[b"status"] == str(state).encode(), raw
    client.flushall()
    return raw


def entry(state: JobState, n: int, jid: str, fields: dict[bytes, bytes]) -> tuple[str, int]:
    """Fill the varied fields of copy `n`; return its index member and score."""
    at = T_BASE + n // 2  # two jobs a millisecond
    stamp = str(at).encode()
    for name in TIME_FIELDS:
        if name in fields:
            fields[name] = stamp
    fields[b"type"] = TYPES[n % len(TYPES)].encode()
    if b"id" in fields:
        fields[b"id"] = jid.encode()
    if state is JobState.PENDING:
        priority = n % 5 - 2
        fields[b"priority"], fields[b"seq"] = str(priority).encode(), str(n + 1).encode()
        return f"{n + 1:016d}:{jid}", -priority
    if state is JobState.SCHEDULED:
        fields[b"scheduled_at"] = str(at + FUTURE).encode()
        return jid, at + FUTURE
    if state is JobState.RETRYING:
        fields[b"next_retry_at"] = stamp
        return jid, at
    if state is JobState.PROCESSING:
        return jid, at + LEASE_MS  # the lease deadline
    return jid, at  # finished_at


def load(
    client: redis.Redis, keys: Keys, state: JobState, shape: dict[bytes, bytes], count: int
) -> None:
    """Write `count` copies of `shape` in `state` and their index entries, pipelined."""
    index = keys.state_index(state)
    for start in range(0, count, BATCH):
        pipe = client.pipeline(transaction=False)
        for n in range(start, min(start + BATCH, count)):
            jid, fields = str(uuid.uuid4()), dict(shape)
            member, score = entry(state, n, jid, fields)
            pipe.hset(keys.job(jid), mapping=fields)
            pipe.zadd(index, {member: score})
            if state is JobState.PENDING:
                pipe.zadd(keys.pending_since, {jid: fields[b"eligible_at"]})
        pipe.execute()


def middle(client: redis.Redis, keys: Keys, state: JobState) -> Position:
    """Return the cursor of the index's middle entry."""
    index = keys.state_index(state)
    half = client.zcard(index) // 2
    [(member, score)] = client.zrange(index, half, half, withscores=True)
    if state is JobState.PROCESSING:  # paged by start time: the lease began LEASE_MS before
        return Position(int(score) - LEASE_MS, member.decode())
    return Position(int(score), member.decode())


def commandstats(client: redis.Redis) -> tuple[float, float]:
    """Return (commands, usec) since the last CONFIG RESETSTAT, as a page counts them."""
    calls = usec = 0.0
    for key, value in client.info("commandstats").items():
        command = key.removeprefix("cmdstat_")
        if command in ("info", "config|resetstat"):
            continue
        if command != "evalsha":
            calls += value["calls"]
        if command.split("|")[0] not in INNER:
            usec += value["usec"]
    return calls, usec


def measure(client: redis.Redis, name: str, jobs: int, reads: int, page: Callable[[], int]) -> Case:
    """Read one page `reads` times; return the medians of its time, commands and Redis CPU.

    Medians of single reads (statistics reset before each): a read preempted by another
    process on a busy machine counts as one read, not as a share of the total.
    """
    page()  # scripts loaded, connections open
    times, commands, cpu, listed = [], [], [], 0
    for _ in range(reads):
        client.config_resetstat()
        started = time.perf_counter()
        listed = page()
        times.append((time.perf_counter() - started) * 1000)
        calls, usec = commandstats(client)
        commands.append(calls)
        cpu.append(usec)
    median = statistics.median
    return Case(name, jobs, median(times), median(commands), median(cpu), listed)


def lister(
    scripts: Scripts,
    state: JobState,
    queues: list[str],
    cursor: Position | None = None,
    job_type: str | None = None,
    limit: int = 50,
) -> Callable[[], int]:
    text = None if cursor is None else cursor.cursor()

    def page() -> int:
        return len(
            list_jobs(scripts, state, queues, limit=limit, cursor=text, job_type=job_type).jobs
        )

    return page


def run_size(jobs: int, reads: int, progress: Callable[[str], None]) -> list[Case]:
    """Measure every case with `jobs` jobs in the index under test."""
    cases: list[Case] = []
    keys = Keys()
    with private_redis(**{"hash-max-listpack-value": "512"}) as server:
        client = server.client(socket_timeout=60)
        scripts = Scripts(client, keys)
        for state in JobState:
            count = RUNNING if state is JobState.PROCESSING else jobs
            shape = template(client, keys, state)
            started = time.perf_counter()
            load(client, keys, state, shape, count)
            progress(f"{count:,} {state} loaded in {time.perf_counter() - started:.1f} s")
            scripts.load()
            one = [keys.queue]
            deep = middle(client, keys, state)
            cases.append(measure(client, f"{state} first page", count, reads,
                                 lister(scripts, state, one)))  # fmt: skip
            cases.append(measure(client, f"{state} deep page", count, reads,
                                 lister(scripts, state, one, deep)))  # fmt: skip
            if state is JobState.PENDING:
                gone = scripts.cancel(deep.job_id)  # the real transition: the entry leaves
                assert gone.changed
                cases.append(measure(client, "pending after the cursor's job left", count,
                                     reads, lister(scripts, state, one, deep)))  # fmt: skip
            if state is JobState.COMPLETED:
                for job_type, label in ((TYPES[3], "1 in 10"), (ABSENT_TYPE, "none")):
                    cases.append(measure(client, f"completed deep, type filter ({label})",
                                         count, reads,
                                         lister(scripts, state, one, deep, job_type)))  # fmt: skip
                cases.append(measure(client, "completed first page, limit 1000", count, reads,
                                     lister(scripts, state, one, limit=1000)))  # fmt: skip
            client.flushall()
        shape = template(client, keys, JobState.COMPLETED)
        for queue in QUEUES3:
            load(client, keys.for_queue(queue), JobState.COMPLETED, shape, jobs // 3)
        deep = middle(client, keys.for_queue(QUEUES3[0]), JobState.COMPLETED)
        cases.append(measure(client, "completed deep, 3 queues", jobs // 3 * 3, reads,
                             lister(scripts, JobState.COMPLETED, list(QUEUES3), deep)))  # fmt: skip
        client.close()
    return cases


def table(large: list[Case], small: list[Case]) -> str:
    """Return the cases side by side: the small size, then the large one."""
    n_small = max(c.jobs for c in small)
    n_large = max(c.jobs for c in large)
    cols = "  {:>6} {:>8} {:>8} {:>9}"
    lines = [
        f"{'':38}" + f"  {f'n = {n_small:,}':^34}" + f"  {f'n = {n_large:,}':^34}",
        f"{'page (limit 50 unless said)':38}"
        + cols.format("jobs", "ms", "commands", "Redis µs") * 2,
    ]
    for s, g in zip(small, large, strict=True):
        row = f"{s.name:38}"
        for c in (s, g):
            row += cols.format(
                c.listed, f"{c.page_ms:.2f}", f"{c.commands:.0f}", f"{c.redis_us:.0f}"
            )
        lines.append(row)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=1_000_000, help="the large size")
    parser.add_argument("--small", type=int, default=1_000, help="the size to compare with")
    parser.add_argument("--reads", type=int, default=50, help="reads of each page")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    def progress(line: str) -> None:
        print(line, flush=True)

    small = run_size(args.small, args.reads, progress)
    large = run_size(args.jobs, args.reads, progress)
    print(table(large, small))
    if args.json:
        figures = {"large": [asdict(c) for c in large], "small": [asdict(c) for c in small]}
        args.json.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
