"""Token guessing against a real gunicorn gateway: how many wrong tokens one
client gets compared, and how fast the gateway answers the rest.

One client on one keep-alive connection sends wrong bearer tokens for `--seconds`, then the
right one. Prints the answers by status, the requests per second, and whether the right token
was let through while the address was locked out.

    .venv/bin/python -m bench.guessing [--seconds 5]
"""

from __future__ import annotations

import argparse
import http.client
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.support.gunicorn import run_gunicorn
from tests.support.redis_server import private_redis

TOKEN = "bench-token"


def guess(port: int, seconds: float) -> dict[str, object]:
    """Send wrong tokens for `seconds` on one connection; return what came back."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    statuses: Counter[int] = Counter()
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        connection.request("GET", "/stats", headers={"Authorization": "Bearer wrong"})
        response = connection.getresponse()
        response.read()
        statuses[response.status] += 1
    elapsed = time.monotonic() - started
    connection.request("GET", "/stats", headers={"Authorization": f"Bearer {TOKEN}"})
    right = connection.getresponse()
    right.read()
    return {
        "statuses": dict(statuses),
        "requests_per_s": round(sum(statuses.values()) / elapsed),
        "answered_401": statuses[401],
        "right_token_while_locked": right.status,
    }


def main() -> None:
    """Run the gateway and the guesser; print the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    with (
        private_redis() as server,
        tempfile.TemporaryDirectory() as tmp,
        run_gunicorn(server.url, Path(tmp), TASKFORGE_API_TOKEN=TOKEN) as gateway,
    ):
        print(json.dumps(guess(gateway.port, args.seconds), indent=2))


if __name__ == "__main__":
    main()
