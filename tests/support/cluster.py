"""A real Redis Cluster on loopback: 3 masters with a replica each, for tests and benchmarks.

Six ``redis-server --cluster-enabled yes`` (RedisServer, each in its own directory with its own
cluster-config-file), joined by ``redis-cli --cluster create … --cluster-replicas 1``. Every node
listens on its port and on port + 10000 (the cluster bus), so both must be free. Helpers kill a
master with SIGKILL, wait for its replica's promotion, and tell which master owns a key.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.cluster import key_slot

from tests.support.redis_server import NO_PERSISTENCE, RedisServer
from tests.support.tools import ephemeral_range, free_port, wait_until

NODES = 6
REPLICAS = 1  # per master: 3 masters, 3 replicas
BUS_OFFSET = 10000  # Redis's cluster bus listens on port + 10000
CREATE_TIMEOUT = 60.0  # seconds for `redis-cli --cluster create` itself
STATE_TIMEOUT = 30.0  # seconds for every node to say cluster_state:ok
# A master silent this long is failed by the others; short, so a failover test is quick, yet
# above what a loaded 2-core machine stalls a healthy node for.
NODE_TIMEOUT_MS = 2000
FAILOVER_TIMEOUT = 30.0  # seconds for a replica's promotion after its master's death
SLOTS = 16384


def free_cluster_port() -> int:
    """Return a port whose cluster-bus port (port + 10000) was free a moment ago too, both
    outside the ephemeral range where there is room (tests.support.tools.free_port says why)."""
    low, high = ephemeral_range()
    for attempt in range(200):
        port = free_port()
        bus_port = port + BUS_OFFSET
        if bus_port > 65535 or (low <= bus_port <= high and attempt < 100):
            continue
        with socket.socket() as bus, contextlib.suppress(OSError):
            bus.bind(("127.0.0.1", bus_port))
            return port
    raise RuntimeError("found no port whose cluster-bus port is free too")


def cluster_config(node_timeout_ms: int = NODE_TIMEOUT_MS) -> dict[str, str]:
    """Return a cluster node's settings (no persistence; its nodes.conf in its own dir)."""
    return {
        **NO_PERSISTENCE,
        "cluster-enabled": "yes",
        "cluster-config-file": "nodes.conf",
        "cluster-node-timeout": str(node_timeout_ms),
        # A master whose replica is gone still serves its slots: kill tests leave one so.
        "cluster-require-full-coverage": "no",
        "cluster-allow-reads-when-down": "no",
        # 0: a replica always stands for election. The default refused to fail over a master
        # killed seconds after the cluster formed ("disconnected from master for longer than
        # allowed": an idle master had sent its replica nothing since the sync).
        "cluster-replica-validity-factor": "0",
        # Sync a new replica at once: by default a master waits 5 s for more replicas before
        # the first sync, and a master killed meanwhile takes everything with it.
        "repl-diskless-sync-delay": "0",
    }


@dataclass
class RedisCluster:
    """Six cluster nodes of ours; after create(), three masters own all 16384 slots."""

    redis_server: str
    redis_cli: str
    dir: Path
    nodes: list[RedisServer] = field(default_factory=list)
    node_timeout_ms: int = NODE_TIMEOUT_MS

    @property
    def url(self) -> str:
        """Return a redis:// URL of one seed node (a cluster client discovers the rest)."""
        return self.live_nodes()[0].url

    @property
    def seeds(self) -> str:
        """Return every node as ``host:port,host:port,…``."""
        return ",".join(f"{n.host}:{n.port}" for n in self.nodes)

    def start(self) -> None:
        """Start six empty nodes, join them into a cluster, and wait until every node is ok."""
        for index in range(NODES):
            directory = self.dir / f"node{index}"
            directory.mkdir(parents=True, exist_ok=True)
            node = RedisServer(
                self.redis_server,
                directory,
                cluster_config(self.node_timeout_ms),
                port=free_cluster_port(),
            )
            node.start()
            self.nodes.append(node)
        addresses = [f"{n.host}:{n.port}" for n in self.nodes]
        replicas = ["--cluster-replicas", str(REPLICAS)]
        created = subprocess.run(
            [self.redis_cli, "--cluster", "create", *addresses, *replicas, "--cluster-yes"],
            capture_output=True,
            text=True,
            timeout=CREATE_TIMEOUT,
            check=False,
        )
        if created.returncode != 0:
            raise RuntimeError(
                f"redis-cli --cluster create failed:\n{created.stdout}\n{created.stderr}"
            )
        self.wait_ok()

    def live_nodes(self) -> list[RedisServer]:
        """Return the nodes whose process runs."""
        return [n for n in self.nodes if n.running]

    def _info(self, node: RedisServer) -> dict[str, str]:
        """Return one node's CLUSTER INFO as a dict."""
        client = node.client(socket_timeout=2)
        try:
            raw = client.execute_command("CLUSTER INFO")
        finally:
            client.close()
        if isinstance(raw, dict):  # redis-py parses CLUSTER INFO itself
            return {str(k): str(v) for k, v in raw.items()}
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
        return {k.strip(): v.strip() for k, v in pairs}

    def _all_ok(self) -> bool:
        for node in self.live_nodes():
            try:
                info = self._info(node)
            except redis.RedisError:
                return False
            if info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != str(SLOTS):
                return False
        return bool(self.masters())

    def _replicas_online(self) -> bool:
        """Tell whether every master has a replica that finished its sync."""
        for master in self.masters():
            client = master.client(socket_timeout=2)
            try:
                info = client.info("replication")
            except redis.RedisError:
                return False
            finally:
                client.close()
            states = [v.get("state") for k, v in info.items() if k.startswith("slave")]
            if "online" not in states:
                return False
        return True

    def wait_ok(self, timeout: float = STATE_TIMEOUT, *, replicated: bool = True) -> None:
        """Wait until every live node reports cluster_state:ok with all slots served and, when
        `replicated`, every master has a replica in sync (a killed master loses no data)."""
        wait_until(self._all_ok, timeout, "cluster_state:ok on every node", interval=0.05)
        if replicated:
            wait_until(self._replicas_online, timeout, "a replica in sync per master", 0.05)

    def _slot_table(self) -> list[tuple[int, int, str, int]]:
        """Return (first slot, last slot, master host, master port) per range, as a node sees it."""
        for node in self.live_nodes():
            client = node.client(socket_timeout=2)
            try:
                ranges = client.execute_command("CLUSTER SLOTS")
            except redis.RedisError:
                continue
            finally:
                client.close()
            table = []
            for entry in ranges:
                first, last, master = int(entry[0]), int(entry[1]), entry[2]
                host = master[0].decode() if isinstance(master[0], bytes) else master[0]
                table.append((first, last, host, int(master[1])))
            return table
        raise RuntimeError("no live cluster node answered CLUSTER SLOTS")

    def masters(self) -> list[RedisServer]:
        """Return the nodes that own slots, by port order."""
        ports = {port for _, _, _, port in self._slot_table()}
        return sorted((n for n in self.live_nodes() if n.port in ports), key=lambda n: n.port)

    def node_by_port(self, port: int) -> RedisServer:
        """Return our node listening on `port`."""
        return next(n for n in self.nodes if n.port == port)

    def master_of_slot(self, slot: int) -> RedisServer:
        """Return the master that owns `slot` now."""
        for first, last, _, port in self._slot_table():
            if first <= slot <= last:
                return self.node_by_port(port)
        raise LookupError(f"no master owns slot {slot}")

    def master_of(self, key: str | bytes) -> RedisServer:
        """Return the master that owns `key`'s slot (its hash tag's, if it has one)."""
        return self.master_of_slot(key_slot(key.encode() if isinstance(key, str) else key))

    def replica_of(self, master: RedisServer) -> RedisServer:
        """Return a live replica of `master` (by its INFO replication)."""
        client = master.client(socket_timeout=2)
        try:
            info = client.info("replication")
        finally:
            client.close()
        for name, value in info.items():
            if name.startswith("slave") and isinstance(value, dict):
                return self.node_by_port(int(value["port"]))
        raise LookupError(f"master on port {master.port} has no replica")

    def kill_master(self, master: RedisServer) -> RedisServer:
        """SIGKILL `master`; return the replica expected to take its place."""
        replica = self.replica_of(master)
        master.kill()
        return replica

    def cut_off_replica(self, master: RedisServer) -> RedisServer:
        """Stop `master`'s replication from now on, as a lagging replica's would (scenario 16's
        cut-off): SIGSTOP its replica (it cannot reconnect) and have the master drop the link
        (nothing more is sent); the master goes on accepting writes. Return the replica: thaw it
        once the master is killed, and it stands for election as usual."""
        replica = self.replica_of(master)
        replica.freeze()
        client = master.client(socket_timeout=2)
        try:
            dropped = client.client_kill_filter(_type="replica")
        finally:
            client.close()
        if dropped != 1:
            raise RuntimeError(f"master on port {master.port} dropped {dropped} replica links")
        return replica

    def rejoin(self, node: RedisServer, timeout: float = STATE_TIMEOUT) -> None:
        """Start a killed node again and wait until every master has a replica in sync: a
        former master finds its slots served by its promoted replica and becomes its replica."""
        node.start()
        self.wait_ok(timeout)

    def wait_promoted(self, replica: RedisServer, timeout: float = FAILOVER_TIMEOUT) -> None:
        """Wait until `replica` is a master serving slots and the cluster is ok again."""

        def promoted() -> bool:
            client = replica.client(socket_timeout=2)
            try:
                role = client.execute_command("ROLE")[0]
            except redis.RedisError:
                return False
            finally:
                client.close()
            return role in (b"master", "master") and replica in self.masters()

        wait_until(promoted, timeout, f"promotion of the replica on port {replica.port}", 0.05)
        self.wait_ok(timeout, replicated=False)  # its old master is dead: it has no replica

    def flushall(self) -> None:
        """Empty every master (replicas follow), and forget every script."""
        for master in self.masters():
            client = master.client()
            try:
                client.flushall()
                client.script_flush()
            finally:
                client.close()

    def client(self, **options: object) -> redis.cluster.RedisCluster:
        """Return a cluster client of our own (a test's: decode nothing)."""
        seed = self.live_nodes()[0]
        return redis.cluster.RedisCluster(host=seed.host, port=seed.port, **options)  # type: ignore[arg-type]

    def stop(self) -> None:
        """Stop every node, whatever state a test left it in."""
        for node in self.nodes:
            node.close()


def queue_names_on_distinct_masters(cluster: RedisCluster, count: int = 3) -> list[str]:
    """Return `count` queue names whose hash tags ``{taskforge:<name>}`` land on distinct masters."""
    chosen: dict[int, str] = {}
    for index in range(1000):
        name = f"q{index}"
        port = cluster.master_of(f"{{taskforge:{name}}}").port
        chosen.setdefault(port, name)
        if len(chosen) == count:
            return list(chosen.values())
    raise LookupError(f"found no {count} queue names on distinct masters")


@contextlib.contextmanager
def running_cluster(redis_server: str, redis_cli: str, **options: object) -> Iterator[RedisCluster]:
    """Yield a started cluster in a temporary directory; stop and remove it after the block."""
    with tempfile.TemporaryDirectory(prefix="taskforge-cluster-") as data_dir:
        cluster = RedisCluster(redis_server, redis_cli, Path(data_dir), **options)  # type: ignore[arg-type]
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()
