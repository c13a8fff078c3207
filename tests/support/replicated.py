"""A private primary and its replica (``redis-server --replicaof``), for durable mode's tests.

Both are tests.support.redis_server.RedisServer processes of ours on free ports, so a test may
freeze the replica (SIGSTOP: its primary's WAIT then times out), kill it and start it again.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.redis_server import NO_PERSISTENCE, RedisServer
from tests.support.tools import wait_until

SYNC_TIMEOUT = 15.0  # seconds for a replica to connect, load the primary's data and catch up
# The primary sends a new replica its data at once (Redis 7 waits 5 s by default for more
# replicas to share a diskless transfer).
PRIMARY_CONFIG = {**NO_PERSISTENCE, "repl-diskless-sync-delay": "0"}


@dataclass
class Replicated:
    """A primary and one replica of it."""

    primary: RedisServer
    replica: RedisServer

    def wait_synced(self, timeout: float = SYNC_TIMEOUT) -> None:
        """Return once the replica's link is up and it has everything the primary wrote."""
        primary, replica = self.primary.client(), self.replica.client()
        try:

            def caught_up() -> bool:
                mine = replica.info("replication")
                if mine.get("master_link_status") != "up":
                    return False
                theirs = primary.info("replication")
                offset = int(theirs.get("master_repl_offset", -1))
                return int(mine.get("slave_repl_offset", -2)) >= offset

            wait_until(caught_up, timeout, "the replica to catch up with its primary")
        finally:
            primary.close()
            replica.close()

    def close(self) -> None:
        """Thaw and stop both, whatever state a failed test left them in."""
        self.replica.close()
        self.primary.close()


@contextlib.contextmanager
def replicated_redis(binary: str, directory: Path | None = None) -> Iterator[Replicated]:
    """Yield a running primary and a replica in sync with it; stop both when the block ends."""
    with contextlib.ExitStack() as stack:
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tf-repl-")))
        (directory / "primary").mkdir(parents=True, exist_ok=True)
        (directory / "replica").mkdir(exist_ok=True)
        primary = RedisServer(binary, directory / "primary", dict(PRIMARY_CONFIG))
        primary.start()
        stack.callback(primary.close)
        replica_config = {**NO_PERSISTENCE, "replicaof": f"{primary.host} {primary.port}"}
        replica = RedisServer(binary, directory / "replica", replica_config)
        replica.start()
        stack.callback(replica.close)
        pair = Replicated(primary, replica)
        pair.wait_synced()
        yield pair
