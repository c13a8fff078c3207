"""Count the commands each named Redis connection sends, with MONITOR, for a bounded time.

INFO commandstats counts by command for the whole server; MONITOR names the connection each
command came from, and CLIENT LIST maps connections to the names TaskForge gives them
(``taskforge-<role>-<pid>``, shared.connect.redis_conn). A script call counts as one ``evalsha
<sha>``; the commands the script runs inside are not attributed (Redis shows them as "lua").
"""

from __future__ import annotations

import time
from collections import Counter

import redis


def commands_by_connection(url: str, name_prefix: str, seconds: float) -> dict[str, Counter[str]]:
    """Watch Redis at `url` for `seconds`; return the commands of every connection whose name
    starts with `name_prefix`, by connection name (those silent all along included)."""
    client = redis.Redis.from_url(url, socket_timeout=0.2)
    try:
        names = {
            client_info["addr"]: client_info["name"]
            for client_info in client.client_list()
            if client_info["name"].startswith(name_prefix)
        }
        counts: dict[str, Counter[str]] = {name: Counter() for name in names.values()}
        deadline = time.monotonic() + seconds
        with client.monitor() as monitor:
            while time.monotonic() < deadline:
                try:
                    entry = monitor.next_command()
                except redis.TimeoutError:
                    continue
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
        client.close()
