"""Count the commands each named Redis connection sends, with MONITOR, for a bounded time.

INFO commandstats counts by command for the whole server; MONITOR names the connection each
command came from, and CLIENT LIST maps connections to the names TaskForge gives them
(``taskforge-<role>-<pid>``, shared.connect.redis_conn). A script call counts as one ``evalsha
<sha>``; the commands the script runs inside are not attributed (Redis shows them as "lua").
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import redis


def commands_by_connection(url: str, name_prefix: str, seconds: float) -> dict[str, Counter[str]]:
    """Watch Redis at `url` for `seconds`; return the commands of every connection whose name
    starts with `name_prefix`, by connection name (those silent all along included)."""
    # No short read timeout: redis-py drops the connection on a read timeout, and MONITOR's
    # next read then fails. A PING every 0.1 s once the window has closed wakes the read instead.
    client = redis.Redis.from_url(url, socket_timeout=seconds + 10)
    nudger = redis.Redis.from_url(url, socket_timeout=5)
    deadline = float("inf")  # set when the watch starts
    stop = threading.Event()

    def nudge() -> None:
        while not stop.wait(0.1):
            if time.monotonic() >= deadline:
                nudger.ping()

    thread = threading.Thread(target=nudge, daemon=True)

    try:
        names = {
            client_info["addr"]: client_info["name"]
            for client_info in client.client_list()
            if client_info["name"].startswith(name_prefix)
        }
        counts: dict[str, Counter[str]] = {name: Counter() for name in names.values()}
        with client.monitor() as monitor:
            deadline = time.monotonic() + seconds
            thread.start()
            while time.monotonic() < deadline:
                entry = monitor.next_command()
                address = f"{entry['client_address']}:{entry['client_port']}"
                if address not in names:
                    continue
                words = entry["command"].split()
                command = words[0].lower()
                if command == "evalsha" and len(words) > 1:
                    command = f"evalsha {words[1]}"
                counts[names[address]][command] += 1
        return counts
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(timeout=10)  # before closing the client its PING may be using
        client.close()
        nudger.close()
