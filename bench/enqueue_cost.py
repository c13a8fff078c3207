"""What one POST /enqueue costs Redis and the gateway, by the way a producer makes it safe to resend.

    .venv/bin/python -m bench.enqueue_cost --tree /tmp/clientids-before --tree . --rounds 3
    .venv/bin/python -m bench.enqueue_cost --tree /tmp/before --tree . --kinds plain --clients 4 16

Three kinds of request, each measured on each tree's own code (a private Redis, the tree's
gateway under gunicorn): ``plain`` (no key, no id), ``key`` (a fresh Idempotency-Key each, as
the Python client sent until it named its jobs), ``id`` (a fresh client job id each, a UUIDv8
with the queue's tag, as it sends now; a tree whose gateway refuses it is skipped). Per
request: Redis commands (``INFO commandstats``: the commands scripts run, and the script calls
apart), Redis CPU µs (``used_cpu_user`` + ``used_cpu_sys``), gateway CPU µs (its workers') and
each request's time, sent to answered (p50 and p99),
over N requests from C keep-alive connections (``--clients``, 4 unless told: the gateway's
threads share Redis requests among the calls they make at once, shared.engine.scripts.
group_commit, so Redis's cost per request falls as more arrive together). Medians over the
rounds (interleaved).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

KINDS = ("plain", "key", "id")

ONE_SIDE = """
import hashlib, http.client, json, os, threading, time, uuid
from bench.gateway import gunicorn
from tests.support.redis_server import private_redis

KIND, N, THREADS = {kind!r}, {requests}, {clients}
TAG = hashlib.blake2b(b"default", digest_size=4).digest()

def client_id():
    raw = bytearray(TAG + os.urandom(12))
    raw[6] = (raw[6] & 0x0F) | 0x80
    raw[8] = (raw[8] & 0x3F) | 0x80
    t = raw.hex()
    return f"{{t[:8]}}-{{t[8:12]}}-{{t[12:16]}}-{{t[16:20]}}-{{t[20:]}}"

FAILED = []
TIMES = []  # seconds each measured request took, sent to answered

def send(conn, count):
    try:
        post(conn, count)
    except Exception as exc:  # a thread's error, raised in the main thread below
        FAILED.append(exc)

def post(conn, count):
    for _ in range(count):
        body = {{"type": "send_email", "payload": {{"to": "ada@example.com", "n": 1}}}}
        headers = {{"Content-Type": "application/json"}}
        if KIND == "key":
            headers["Idempotency-Key"] = uuid.uuid4().hex
        elif KIND == "id":
            body["id"] = client_id()
        sent = time.perf_counter()
        conn.request("POST", "/enqueue", json.dumps(body), headers)
        reply = conn.getresponse()
        reply.read()
        TIMES.append(time.perf_counter() - sent)
        if reply.status != 201:
            raise RuntimeError(f"HTTP {{reply.status}}")

def run(count):
    conns = [http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10) for _ in range(THREADS)]
    threads = [threading.Thread(target=send, args=(c, count // THREADS)) for c in conns]
    for t in threads: t.start()
    for t in threads: t.join()
    if FAILED:
        raise SystemExit(str(FAILED[0]))
    return count // THREADS * THREADS

def cpu(info):
    return info["used_cpu_user"] + info["used_cpu_sys"]

with private_redis() as server, gunicorn(server.url) as gw:
    r = server.client()
    run(400)  # warm-up: connections, scripts, the list of queues
    r.config_resetstat()
    TIMES.clear()
    redis_cpu, gateway_cpu = cpu(r.info("cpu")), gw.cpu_seconds()
    done = run(N)
    redis_cpu, gateway_cpu = cpu(r.info("cpu")) - redis_cpu, gw.cpu_seconds() - gateway_cpu
    stats = r.info("commandstats")
    calls = {{k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()}}
    for own in ("info", "config|resetstat"):
        calls.pop(own, None)
    scripts = sum(calls.pop(name, 0) for name in ("evalsha", "eval"))
TIMES.sort()
print(json.dumps({{
    "latency_ms_p50": TIMES[len(TIMES) // 2] * 1e3,
    "latency_ms_p99": TIMES[int(len(TIMES) * 0.99)] * 1e3,
    "commands": sum(calls.values()) / done, "script_calls": scripts / done,
    "by_command": {{k: v / done for k, v in sorted(calls.items())}},
    "redis_cpu_us": redis_cpu / done * 1e6, "gateway_cpu_us": gateway_cpu / done * 1e6,
}}))
"""


def measure(tree: Path, kind: str, requests: int, clients: int) -> dict[str, object] | None:
    """Return one kind's figures on `tree`'s own code, or None when its gateway refuses it."""
    code = ONE_SIDE.format(kind=kind, requests=requests, clients=clients)
    env = {"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin:/usr/local/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        if "HTTP 400" in done.stderr + done.stdout:
            return None
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    """Measure every (tree, kind) in interleaved rounds; print medians (and JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, action="append", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--clients", type=int, nargs="+", default=[4])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    trees = [tree.resolve() for tree in args.tree]
    rows: dict[tuple[str, str, int], list[dict[str, object]]] = {}
    for round_no in range(args.rounds):
        order = trees if round_no % 2 == 0 else trees[::-1]
        for tree in order:
            for kind in args.kinds:
                for clients in args.clients:
                    found = measure(tree, kind, args.requests, clients)
                    if found is not None:
                        rows.setdefault((str(tree), kind, clients), []).append(found)
    print(
        "| tree | kind | clients | Redis commands | script calls | Redis CPU µs | gateway CPU µs "
        "| latency p50 / p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for (tree, kind, clients), found in rows.items():
        figures = [
            statistics.median(float(f[name]) for f in found)  # type: ignore[arg-type]
            for name in (
                "commands",
                "script_calls",
                "redis_cpu_us",
                "gateway_cpu_us",
                "latency_ms_p50",
                "latency_ms_p99",
            )
        ]
        print(
            f"| {tree} | {kind} | {clients} | {figures[0]:.2f} | {figures[1]:.2f} | "
            f"{figures[2]:.1f} | {figures[3]:.0f} | {figures[4]:.2f} / {figures[5]:.2f} |"
        )
        print(f"|  | commands | | {found[-1]['by_command']} | | | | |")
    if args.json:
        args.json.write_text(
            json.dumps({f"{t}|{k}|{c}": v for (t, k, c), v in rows.items()}, indent=1)
        )


if __name__ == "__main__":
    main()
