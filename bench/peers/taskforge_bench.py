"""TaskForge's producer for the side-by-side workloads (run in TaskForge's own .venv).

The engine call (``Scripts.enqueue``; ``enqueue_many`` for ``bulk``/``fill``, 1,000 a call),
or, with ``BENCH_GATEWAY_URL`` set, ``POST /enqueue`` through the running gateway (latency
only). The headline TaskForge figures come from bench.engine, bench.workers and
bench.gateway; this module gives the figures those do not (p95, Redis cost per job, HTTP
enqueue-to-start) by exactly the peers' method.
"""

from __future__ import annotations

import http.client
import json
import os
import time
import urllib.parse
import uuid

READY_TIMEOUT = 20.0


def _gateway_sender(url: str):
    """Return send(sent) that POSTs one job to the gateway over one keep-alive connection."""
    parts = urllib.parse.urlsplit(url)
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        try:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
            conn.request("GET", "/ready")
            if conn.getresponse().read() and True:
                break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)

    def send(sent: float) -> None:
        body = json.dumps({"type": "bench_stamp", "payload": {"sent": sent}})
        conn.request("POST", "/enqueue", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        if response.status != 201:
            raise RuntimeError(f"POST /enqueue answered {response.status}")

    return send


def producer():
    """Return the producer functions bench.peers.runner calls: single, bulk, send."""
    import redis

    from bench.peers.stamp import redis_url
    from shared.engine.scripts import Scripts
    from shared.model.jobs import validate_enqueue

    scripts = Scripts(redis.Redis.from_url(redis_url()))
    plain = validate_enqueue({"type": "bench_stamp", "payload": {}})

    def single(count: int) -> None:
        for _ in range(count):
            scripts.enqueue(plain, str(uuid.uuid4()))

    def bulk(count: int) -> None:
        for start in range(0, count, 1000):
            size = min(1000, count - start)
            scripts.enqueue_many([(plain, str(uuid.uuid4())) for _ in range(size)])

    def engine_send(sent: float) -> None:
        request = validate_enqueue({"type": "bench_stamp", "payload": {"sent": sent}})
        scripts.enqueue(request, str(uuid.uuid4()))

    gateway = os.environ.get("BENCH_GATEWAY_URL")
    return single, bulk, _gateway_sender(gateway) if gateway else engine_send
