"""A private Sentinel deployment on loopback: a primary, one replica and three sentinels.

Every process is ours, on free ports, in a temporary directory, and killed when the block
ends. The sentinels run as ``redis-server <conf> --sentinel``: the same binary as the data
nodes (Debian's ``redis-sentinel`` is only a link to it), so no second package is needed and
the sentinels can never be another version than the servers they watch. They decide quickly
(``down-after-milliseconds`` 1000) so a failover takes a few seconds, not the default minute.
Every wait is bounded. With ``sentinel_password`` the sentinels require it (``requirepass``,
and ``sentinel-pass`` among themselves); with ``data_password`` the primary and replica do
(``requirepass`` and ``masterauth``, and the sentinels' ``auth-pass``).
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.support.redis_server import NO_PERSISTENCE, NO_RETRY, RedisServer
from tests.support.tools import free_port, require_tool, wait_until

SERVICE = "taskforge"
DOWN_AFTER_MS = 1000  # a primary silent this long is subjectively down
FAILOVER_TIMEOUT_MS = 4000  # a failed failover is tried again after twice this
QUORUM = 2  # of the three sentinels must agree the primary is down
SETTLE_TIMEOUT = 30.0  # seconds for the sentinels to find each other and the replica
# Either server may be the primary a replica full-syncs from (at the start, and after a failover
# when the old primary rejoins): Redis's default diskless delay holds every such sync 5 s for
# more replicas to share it, 5 s a failover test's resume bound then spends on nothing (the
# durable scenario's replica rejoins the promoted primary: enqueues resumed 7.5 s after the
# kill, promotion 2.5 s). One replica here: start the transfer at once (tests/support/cluster.py).
DATA_CONFIG = {**NO_PERSISTENCE, "repl-diskless-sync-delay": "0"}
PROMOTION_TIMEOUT = 30.0  # seconds from the kill until every sentinel names a new primary


@dataclass
class SentinelProcess:
    """One sentinel: ``redis-server sentinel.conf --sentinel`` (it rewrites its conf file)."""

    binary: str
    dir: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    password: str | None = None  # its requirepass (and the one other sentinels ask for)
    data_password: str | None = None  # the primary's and replica's, for auth-pass

    @property
    def conf(self) -> Path:
        return self.dir / "sentinel.conf"

    def start(self, primary_port: int) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        secrets = []
        if self.password is not None:
            secrets += [f"requirepass {self.password}", f"sentinel sentinel-pass {self.password}"]
        if self.data_password is not None:
            secrets.append(f"sentinel auth-pass {SERVICE} {self.data_password}")
        self.conf.write_text(
            "\n".join(
                [
                    "bind 127.0.0.1",
                    f"port {self.port}",
                    f"dir {self.dir}",
                    f"logfile {self.dir / 'sentinel.log'}",
                    f"sentinel monitor {SERVICE} 127.0.0.1 {primary_port} {QUORUM}",
                    f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
                    f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
                    f"sentinel parallel-syncs {SERVICE} 1",
                    *secrets,
                    "",
                ]
            )
        )
        self.process = subprocess.Popen(
            [self.binary, str(self.conf), "--sentinel"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )

    def client(self) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            socket_timeout=2,
            retry=NO_RETRY,
            decode_responses=True,
            password=self.password,
        )

    def master(self) -> dict[str, object] | None:
        """Return SENTINEL MASTER's fields for our service, None when it does not answer."""
        client = self.client()
        try:
            return client.sentinel_master(SERVICE)
        except redis.RedisError:
            return None
        finally:
            client.close()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None


@dataclass
class SentinelDeployment:
    """A primary, a replica of it, and three sentinels watching the primary as ``SERVICE``."""

    binary: str
    dir: Path
    servers: list[RedisServer] = field(default_factory=list)
    sentinels: list[SentinelProcess] = field(default_factory=list)
    sentinel_password: str | None = None
    data_password: str | None = None

    @property
    def url(self) -> str:
        """Return the redis+sentinel:// URL TaskForge reaches the primary by (with the data
        nodes' password; the sentinels' goes in REDIS_SENTINEL_PASSWORD)."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        auth = f":{self.data_password}@" if self.data_password is not None else ""
        return f"redis+sentinel://{auth}{hosts}/{SERVICE}/0"

    def data_client(self, server: RedisServer, **options: object) -> redis.Redis:
        """Return a client straight to a data node, with its password if it has one."""
        return server.client(password=self.data_password, **options)

    def start(self) -> None:
        primary = RedisServer(self.binary, self.dir / "primary", dict(DATA_CONFIG))
        primary.dir.mkdir(parents=True)
        primary.start()
        self.servers.append(primary)
        replica = RedisServer(self.binary, self.dir / "replica", dict(DATA_CONFIG))
        replica.dir.mkdir(parents=True)
        replica.start()
        self.servers.append(replica)
        if self.data_password is not None:
            # Set once both answer (their start waits for a PING without a password); the
            # connections made below then carry it.
            for server in (primary, replica):
                client = server.client()
                try:
                    client.config_set("masterauth", self.data_password)
                    client.config_set("requirepass", self.data_password)
                finally:
                    client.close()
        client = self.data_client(replica)
        try:
            client.replicaof("127.0.0.1", primary.port)
        finally:
            client.close()
        wait_until(
            lambda: _link_up(self.data_client(replica, socket_timeout=1)),
            SETTLE_TIMEOUT,
            "the replica's link to the primary",
        )
        for n in range(3):
            sentinel = SentinelProcess(
                self.binary,
                self.dir / f"sentinel{n}",
                password=self.sentinel_password,
                data_password=self.data_password,
            )
            sentinel.start(primary.port)
            self.sentinels.append(sentinel)
        wait_until(self._settled, SETTLE_TIMEOUT, "three sentinels that know each other")

    def _settled(self) -> bool:
        """Every sentinel sees the primary up, its replica, and the two other sentinels."""
        for sentinel in self.sentinels:
            state = sentinel.master()
            if state is None or not state.get("is_master") or state.get("is_sdown"):
                return False
            if int(state["num-slaves"]) < 1 or int(state["num-other-sentinels"]) < 2:
                return False
        return True

    def primary_port(self) -> int | None:
        """Return the port the sentinels agree the primary is on (None while they disagree)."""
        ports = set()
        for sentinel in self.sentinels:
            state = sentinel.master()
            if state is None:
                return None
            ports.add(int(state["port"]))
        return ports.pop() if len(ports) == 1 else None

    def server_on(self, port: int) -> RedisServer:
        return next(server for server in self.servers if server.port == port)

    def kill_primary(self) -> RedisServer:
        """SIGKILL the current primary (as a crash would) and return it."""
        port = self.primary_port()
        assert port is not None, "the sentinels do not agree on a primary"
        primary = self.server_on(port)
        primary.kill()
        return primary

    def stop_replication(self) -> RedisServer:
        """Make the replica fall behind from now on: SIGSTOP it (so it cannot reconnect) and
        have the primary drop its link (so nothing more is sent). The primary keeps accepting
        writes the replica will never get, as a lagging replica of a busy primary would.
        Return the replica; `thaw()` it once the primary is gone."""
        port = self.primary_port()
        assert port is not None, "the sentinels do not agree on a primary"
        replica = next(server for server in self.servers if server.port != port)
        replica.freeze()
        client = self.data_client(self.server_on(port))
        try:
            dropped = client.client_kill_filter(_type="replica")
        finally:
            client.close()
        assert dropped == 1, f"the primary dropped {dropped} replica links, not 1"
        return replica

    def wait_for_promotion(self, old_port: int, timeout: float = PROMOTION_TIMEOUT) -> RedisServer:
        """Return the new primary once every sentinel names it and it says it is a master."""

        def promoted() -> RedisServer | None:
            port = self.primary_port()
            if port is None or port == old_port:
                return None
            server = self.server_on(port)
            client = self.data_client(server, socket_timeout=1)
            try:
                return server if client.role()[0] in (b"master", "master") else None
            except redis.RedisError:
                return None
            finally:
                client.close()

        return wait_until(promoted, timeout, "a replica promoted by the sentinels", 0.05)

    def close(self) -> None:
        for sentinel in self.sentinels:
            sentinel.kill()
        for server in self.servers:
            server.kill()


def _link_up(client: redis.Redis) -> bool:
    """Tell whether the replica `client` reaches has its link to the primary up; close it."""
    try:
        return client.info("replication").get("master_link_status") == "up"
    except redis.RedisError:
        return False
    finally:
        client.close()


@contextlib.contextmanager
def sentinel_deployment(
    *, sentinel_password: str | None = None, data_password: str | None = None
) -> Iterator[SentinelDeployment]:
    """Yield a settled deployment (fails under CI, skips elsewhere, without redis-server);
    every process is killed and the directory removed when the block ends. The passwords,
    when given, are required by the sentinels and by the data nodes respectively."""
    binary = require_tool("redis-server")
    with tempfile.TemporaryDirectory(prefix="taskforge-sentinel-") as directory:
        deployment = SentinelDeployment(
            binary,
            Path(directory),
            sentinel_password=sentinel_password,
            data_password=data_password,
        )
        try:
            deployment.start()
            yield deployment
        finally:
            deployment.close()


def elapsed_since(start: float) -> float:
    """Return seconds since `start` (time.monotonic())."""
    return time.monotonic() - start
