"""Readiness on a Redis Cluster: each master checked apart, the ones that do not answer named.

Every gateway and workerd shares the one cluster, so a master failing over is the same for all
of them: a load balancer that drops every gateway because one master is down turns the other
masters' queues (which keep working, docs/CLUSTER.md) into refused connections too. So on a
cluster /ready stays 200 while at least one master answers (with our scripts loaded), names
those that do not, and is 503 only when none answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.connect.redis_conn import MASTER_DOWN
from shared.engine import durable
from shared.engine.scripts import Scripts
from shared.obs.log import unavailable_text


@dataclass
class MastersCheck:
    """Which masters answered (scripts loaded there) and why each other one did not."""

    answering: list[str] = field(default_factory=list)
    down: dict[str, str] = field(default_factory=dict)
    # Durable mode: ``{"connected": n, "wanted": w}``, n the fewest replicas connected to a
    # master that answered (None: not asked).
    replicas: dict[str, int] | None = None

    def body(self) -> dict[str, object]:
        """Return the part of a /ready body that names the masters (nothing when all answer)."""
        if not self.down:
            return {}
        return {"masters_down": self.down, "masters_answering": self.answering}

    def reason(self) -> str:
        """Return why no master answered, for a 503 /ready body."""
        return next(iter(self.down.values()), "no cluster master known")


def check_masters(scripts: Scripts) -> MastersCheck:
    """Check each master the client knows and load our scripts where they are missing.

    One SCRIPT EXISTS per master (a SCRIPT LOAD per script only after a restart or failover
    emptied that master's cache), and in durable mode (the scripts' policy) one INFO
    replication. A master that does not answer is named with the reason.
    """
    client = scripts.redis
    wanted_replicas = scripts.policy.wait_replicas
    check = MastersCheck()
    counts = []
    try:
        primaries = client.get_primaries()  # type: ignore[attr-defined]
    except MASTER_DOWN as exc:
        # No seed answered yet (shared/connect/redis_conn.py builds the client on first use): no
        # master is known, and the reason names the seeds tried.
        check.down["seeds"] = unavailable_text(exc)
        return check
    for node in primaries:
        name = f"{node.host}:{node.port}"
        try:
            scripts.ensure_loaded_on(node)
            if wanted_replicas:
                counts.append(durable.replicas_connected(client.get_redis_connection(node))[1])
        except MASTER_DOWN as exc:
            check.down[name] = unavailable_text(exc)
        else:
            check.answering.append(name)
    if wanted_replicas:
        # The weakest master that answered decides (as durable.replicas_body).
        check.replicas = {"connected": min(counts, default=0), "wanted": wanted_replicas}
    return check
