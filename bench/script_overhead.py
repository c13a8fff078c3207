"""Where complete-and-claim's Redis time goes: its commands, its Lua, the call itself.

On a private redis-server with one client (no other load), the worker's hot call —
complete.lua completing a job and claiming the next — runs N times back to back; INFO
commandstats then splits EVALSHA's time per call into the inner commands' own time and the
rest. Two reference scripts bound the rest: a bare EVALSHA (``return 1``) with the same number
of keys and arguments, and complete.lua's included definitions alone. What is left is the
script's own Lua and the overhead of each ``redis.call`` (bench/MEASUREMENTS.md, "Holding the
next job").

Last, what the call's width costs: Redis's whole CPU (``INFO cpu``: parsing and answering
included) per bare EVALSHA with complete.lua's 14 keys and 10 arguments, and with 1 key and
5 or 1 arguments, in interleaved rounds: the figure for passing fewer arguments a call.

Run from the repository root: ``.venv/bin/python -m bench.script_overhead [--calls N]``.
"""

from __future__ import annotations

import argparse
import statistics
import uuid

import redis

from bench.memory import redis_cpu
from shared.engine.scripts import Scripts
from shared.engine.scripts.script_base import load_source
from shared.model.jobs import Job, validate_enqueue
from tests.support.redis_server import private_redis

BODY_START = "local events_cap, worker_id"  # complete.lua's first line after its includes


def complete_and_claim(r: redis.Redis, calls: int) -> tuple[float, float]:
    """Return (EVALSHA µs per call, inner commands' µs per call) over `calls` completions."""
    scripts = Scripts(r)
    scripts.load()
    request = validate_enqueue({"type": "t", "payload": {"x": 1}})
    for start in range(0, calls + 2, 1000):
        count = min(1000, calls + 2 - start)
        scripts.enqueue_many([(request, str(uuid.uuid4())) for _ in range(count)])
    job = scripts.claim("w")
    r.config_resetstat()
    for _ in range(calls):
        assert isinstance(job, Job)
        job = scripts.complete(job.id, job.token, claim_next_for="w").next_job
    stats = r.info("commandstats")
    evalsha = stats["cmdstat_evalsha"]
    inner = sum(v["usec"] for k, v in stats.items() if k != "cmdstat_evalsha")
    return evalsha["usec_per_call"], inner / evalsha["calls"]


def reference(r: redis.Redis, text: str, calls: int) -> float:
    """Return the µs per call of `text` run with complete.lua's number of keys and arguments."""
    sha = r.script_load(text)
    keys, args = [f"k{i}" for i in range(14)], [str(i) for i in range(10)]
    r.config_resetstat()
    for _ in range(calls):
        r.evalsha(sha, len(keys), *keys, *args)
    return float(r.info("commandstats")["cmdstat_evalsha"]["usec_per_call"])


SHAPES = ((14, 10), (1, 5), (1, 1))  # (keys, arguments): complete.lua's, then narrower


def width_cost(r: redis.Redis, calls: int, rounds: int = 3) -> dict[tuple[int, int], float]:
    """Return Redis's CPU µs per bare EVALSHA of each shape in SHAPES, median of `rounds`."""
    sha = r.script_load("#!lua flags=allow-oom\nreturn 1\n")
    seen: dict[tuple[int, int], list[float]] = {shape: [] for shape in SHAPES}
    for _ in range(rounds):
        for shape in SHAPES:
            keys = [f"{{q}}:job:{i}:0123456789abcdef" for i in range(shape[0])]
            args = [f"argument-{i}-0123456789" for i in range(shape[1])]
            before = redis_cpu(r)
            for _ in range(calls):
                r.evalsha(sha, len(keys), *keys, *args)
            seen[shape].append((redis_cpu(r) - before) * 1e6 / calls)
    return {shape: statistics.median(values) for shape, values in seen.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    calls = parser.parse_args().calls
    with private_redis() as server:
        r = redis.Redis.from_url(server.url)
        total, inner = complete_and_claim(r, calls)
        source = load_source("complete")
        bare = reference(r, "#!lua flags=allow-oom\nreturn 1\n", calls)
        includes = reference(r, source[: source.index(BODY_START)] + "\nreturn 1\n", calls)
        widths = width_cost(r, calls)
    print(f"complete + claim next, {calls:,} calls on an idle Redis, µs per call:")
    print(f"  EVALSHA in all                         {total:7.1f}")
    print(f"  its 13 inner commands' own time        {inner:7.1f}")
    print(f"  a bare EVALSHA, same keys and args     {bare:7.1f}")
    print(f"  the included definitions (less bare)   {includes - bare:7.1f}")
    print(f"  the rest: redis.call overhead and Lua  {total - inner - includes:7.1f}")
    print("Redis's whole CPU per bare EVALSHA (INFO cpu), µs per call, median of 3:")
    for (keys, args), us in widths.items():
        print(f"  {keys:2} keys, {args:2} arguments                  {us:7.1f}")


if __name__ == "__main__":
    main()
