"""The producer side of a peer, run inside the peer's virtualenv.

``python -m bench.peers.runner bench.peers.<peer>_bench enqueue single 10000`` times one producer enqueueing
with the library's normal API (``bulk``: its bulk API; ``fill``: the fastest way to pre-fill a
queue for a drain, untimed by the controller) and prints ``{"seconds": ...}``;
``latency 300 0.01`` sends jobs 10 ms apart, each carrying the time it was sent; ``warm 4``
sends four jobs marked -1 (never timed) to learn that the workers are up.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Callable

Enqueue = Callable[[int], None]


def main() -> None:
    """Import the peer module named first (never run as __main__: task names carry the
    module's name) and dispatch the rest of the command line to its producer functions."""
    module, command, *args = sys.argv[1:]
    single, bulk, send = importlib.import_module(module).producer()
    if command == "enqueue":
        mode, count = args[0], int(args[1])
        work = {"single": single, "bulk": bulk, "fill": bulk or single}[mode]
        if work is None:
            raise SystemExit(f"no bulk API: {mode}")
        if mode != "fill":
            send(-1.0)  # connect and warm up outside the timed part
        started = time.perf_counter()
        work(count)
        print(json.dumps({"seconds": time.perf_counter() - started, "jobs": count}))
    elif command == "latency":
        count, interval = int(args[0]), float(args[1])
        start = time.perf_counter()
        for index in range(count):
            send(time.time())
            pause = start + (index + 1) * interval - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
        print(json.dumps({"sent": count}))
    elif command == "warm":
        for _ in range(int(args[0])):
            send(-1.0)
        print(json.dumps({"sent": int(args[0])}))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
