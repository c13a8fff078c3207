"""Redis's instructions per job, counted by callgrind: a figure machine load cannot move.

CPU time on a shared 2-core machine swings by a third between runs; the instructions Redis
executes for a job do not. This runs a private redis-server under valgrind's callgrind with
counting off, turns counting on around one workload (callgrind_control) and divides by the jobs:

- enqueue: the tree's producer calling ``Scripts.enqueue`` once per job;
- complete + claim next: one process draining those jobs through the tree's shared.engine.scripts.

``--annotate FILE`` keeps the first tree's drain dump and prints Redis's functions by
instructions, inclusive: where a complete-and-claim-next's instructions go (EVALSHA, the
commands a script runs, the replies made Lua values, the Lua itself).

``--definitions`` counts instead, per hot script, what its include definitions alone cost per
EVALSHA (the script's text up to its own code, then ``return 1``, less a bare ``return 1`` with
complete's 14 keys and 10 arguments): every call runs the whole chunk, so each closure and table
a definition makes is made again on every call. Each include pasted whole, then the tree's own
assembly (shared.engine.lua_source, which keeps only what the script uses).

User-space instructions only: the kernel's share (socket reads and writes, epoll) and cache
misses are not in them, so they rank changes to the work Redis does per job, not its time.
Needs valgrind (``apt install valgrind``).

    .venv/bin/python -m bench.instructions --tree /tmp/old --tree .
    .venv/bin/python -m bench.instructions --jobs 2000 --annotate /tmp/drain.cg
    .venv/bin/python -m bench.instructions --definitions --tree /tmp/old --tree .  # 3 rounds
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import redis

from bench import redis_cost
from bench.peers import harness
from tests.support.redis_server import NO_PERSISTENCE, RedisServer, redis_binary

TOTAL = re.compile(rb"^totals: (\d+)$", re.MULTILINE)
INCLUDE = re.compile(r'^--- @include "([a-z_]+)"$', re.MULTILINE)  # as shared.engine.lua_source
HOT_SCRIPTS = ("enqueue", "complete", "claim", "complete_batch")
BARE = "#!lua flags=allow-oom\nreturn 1\n"
CALLS = 2000


class CallgrindRedis(RedisServer):
    """A private redis-server run under callgrind, counting nothing until told to."""

    last_dump: Path | None = None  # the file instructions() read last

    def args(self) -> list[str]:
        out = f"--callgrind-out-file={self.dir / 'callgrind.out'}"
        log = f"--log-file={self.dir / 'valgrind.log'}"
        return ["valgrind", "--tool=callgrind", "--instr-atstart=no", out, log, *super().args()]

    def instructions(self) -> int:
        """Dump the counts so far and return the instructions counted since the last dump."""
        dumps = set(self.dir.glob("callgrind.out*"))
        subprocess.run(
            ["callgrind_control", "--dump", str(self.pid)], check=True, capture_output=True
        )
        (new,) = set(self.dir.glob("callgrind.out*")) - dumps
        self.last_dump = new
        match = TOTAL.search(new.read_bytes())
        if match is None:
            raise RuntimeError(f"no totals in {new}")
        return int(match.group(1))

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        """Count instructions while the block runs."""
        subprocess.run(
            ["callgrind_control", "-i", "on", str(self.pid)], check=True, capture_output=True
        )
        try:
            yield
        finally:
            subprocess.run(
                ["callgrind_control", "-i", "off", str(self.pid)], check=True, capture_output=True
            )


def measure(tree: Path, jobs: int, keep_drain: Path | None = None) -> dict[str, float]:
    """Return Redis instructions per enqueue and per complete-and-claim-next of `tree`'s code;
    `keep_drain`: where to copy the drain's callgrind dump (for callgrind_annotate)."""
    config = redis_cost.tree_config(tree)
    with tempfile.TemporaryDirectory(prefix="taskforge-callgrind-") as tmp:
        server = CallgrindRedis(redis_binary(), Path(tmp), dict(NO_PERSISTENCE))
        server.start()
        try:
            env = harness.base_env(config, server.url, Path(tmp))
            server.instructions()  # start-up, out of every figure
            # A running deployment's Redis holds the scripts already; a first producer run loads
            # them uncounted (a tree that loads all its scripts on the first NOSCRIPT would
            # otherwise charge 31 script compilations to a handful of jobs).
            harness.produce(config, env, "enqueue", "single", "1")
            with server.counting():
                harness.produce(config, env, "enqueue", "single", str(jobs))
            enqueue = server.instructions()
            with server.counting():
                redis_cost.drain_in_process(config, server.url, env)
            drain = server.instructions()
            if keep_drain is not None:
                assert server.last_dump is not None
                shutil.copyfile(server.last_dump, keep_drain)
            done = redis_cost.completed_count(redis.Redis.from_url(server.url))
        finally:
            server.close()
    # Each producer run enqueues one warm-up job too: the loading run 2, the counted run jobs + 1.
    if done != jobs + 3:
        raise RuntimeError(f"{done} jobs completed of {jobs + 3}")
    return {"enqueue": enqueue / (jobs + 1), "complete_claim_next": drain / done}


def definitions_alone(tree: Path, name: str) -> dict[str, str]:
    """Return script `name`'s definitions then ``return 1``, its includes pasted whole
    ("whole") and as `tree` assembles them ("assembled")."""
    lua = tree / "shared" / "engine" / "lua"
    source = (lua / f"{name}.lua").read_text()
    body = source[list(INCLUDE.finditer(source))[-1].end() :]  # the script's own code
    whole = INCLUDE.sub(lambda m: (lua / "includes" / f"{m.group(1)}.lua").read_text(), source)
    code = f"from shared.engine.lua_source import assemble; print(assemble({name!r}), end='')"
    assembled = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, check=True, capture_output=True, text=True
    ).stdout
    return {
        label: text[: len(text) - len(body)] + "\nreturn 1\n"
        for label, text in (("whole", whole), ("assembled", assembled))
    }


def per_call(server: CallgrindRedis, client: redis.Redis, text: str) -> float:
    """Return Redis instructions per EVALSHA of `text` with complete's 14 keys and 10 args."""
    # A fresh Lua interpreter each time (SCRIPT FLUSH makes one): the scripts loaded before
    # would otherwise grow the heap the garbage collector's steps walk, by about 2,000 a call.
    client.script_flush()
    sha = client.script_load(text)
    keys, args = [f"{{ns:q}}:k{i}" for i in range(14)], [str(i) for i in range(10)]
    for _ in range(200):  # warm: the allocator's and the GC's state settle
        client.evalsha(sha, len(keys), *keys, *args)
    server.instructions()
    with server.counting():
        for _ in range(CALLS):
            client.evalsha(sha, len(keys), *keys, *args)
    return server.instructions() / CALLS


def measure_definitions(trees: list[Path], rounds: int) -> dict[str, dict[str, list[float]]]:
    """Return, per tree label and figure, the instructions a call's definitions add (bare:
    the bare call's own), one value per round, the trees interleaved within each round."""
    out: dict[str, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="taskforge-callgrind-") as tmp:
        server = CallgrindRedis(redis_binary(), Path(tmp), dict(NO_PERSISTENCE))
        server.start()
        try:
            client = redis.Redis.from_url(server.url)
            server.instructions()
            for _ in range(rounds):
                bare = per_call(server, client, BARE)
                for tree in trees:
                    figures = out.setdefault(redis_cost.label_of(tree), {})
                    figures.setdefault("bare", []).append(bare)
                    for name in HOT_SCRIPTS:
                        for label, text in definitions_alone(tree, name).items():
                            extra = per_call(server, client, text) - bare
                            figures.setdefault(f"{name} {label}", []).append(extra)
        finally:
            server.close()
    return out


def spread(values: list[float]) -> str:
    """Return `median (min–max)`, or the one value."""
    if len(values) == 1:
        return f"{values[0]:,.0f}"
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}–{max(values):,.0f})"


def print_definitions(trees: list[Path], rounds: int) -> None:
    """Print the definitions' instructions per call, per tree and hot script."""
    print("| checkout | script | includes pasted whole | as assembled |")
    print("|---|---|---|---|")
    for label, figures in measure_definitions(trees, rounds).items():
        for name in HOT_SCRIPTS:
            whole, assembled = figures[f"{name} whole"], figures[f"{name} assembled"]
            print(f"| {label} | {name}.lua | {spread(whole)} | {spread(assembled)} |")
        print(f"| {label} | (a bare EVALSHA itself) | {spread(figures['bare'])} | |")


def available() -> bool:
    """Tell whether valgrind's callgrind tools are installed."""
    return bool(shutil.which("valgrind") and shutil.which("callgrind_control"))


def main() -> None:
    """Print instructions per job for every tree."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, action="append", help="checkout (repeatable)")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument(
        "--definitions", action="store_true", help="per hot script: its definitions' cost a call"
    )
    parser.add_argument("--rounds", type=int, default=3, help="--definitions: rounds (median)")
    parser.add_argument(
        "--annotate",
        type=Path,
        metavar="FILE",
        help="keep the first tree's drain dump in FILE and print Redis's functions by "
        "instructions, inclusive (callgrind_annotate --inclusive=yes)",
    )
    args = parser.parse_args()
    if not available():
        raise SystemExit("valgrind (callgrind) is not installed: apt install valgrind")
    if args.definitions:
        print_definitions(args.tree or [harness.ROOT], args.rounds)
        return
    print("| checkout | Redis instructions per enqueue | per complete + claim next |")
    print("|---|---|---|")
    for index, tree in enumerate(args.tree or [harness.ROOT]):
        figures = measure(tree, args.jobs, args.annotate if index == 0 else None)
        print(
            f"| {redis_cost.label_of(tree)} | {figures['enqueue']:,.0f} "
            f"| {figures['complete_claim_next']:,.0f} |"
        )
    if args.annotate:
        annotated = subprocess.run(
            ["callgrind_annotate", "--inclusive=yes", str(args.annotate)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        print(f"\nthe drain's Redis functions, inclusive ({args.annotate}):")
        print("\n".join(annotated.splitlines()[:80]))


if __name__ == "__main__":
    main()
