"""Readiness on a Redis Cluster: each master checked apart, the ones that do not answer named.

Every gateway and workerd shares the one cluster, so a master failing over is the same for all
of them: a load balancer that drops every gateway because one master is down turns the other
masters' queues (which keep working, docs/CLUSTER.md) into refused connections too. So on a
cluster /ready stays 200 while at least one master answers (with our scripts loaded), names
those that do not, and is 503 only when none answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared import durable
from shared.log import unavailable_text
from shared.redis_conn import MASTER_DOWN
from shared.scripts import Scripts


@dataclass
class MastersCheck:
    """Which masters answered (scripts loaded there) and why each other one did not."""

    answering: list[str] = field(default_factory=list)
    down: dict[str, str] = field(default_factory=dict)
    # Durable mode: the fewest replicas connected to a master that answered (None: not asked).
    replicas: int | None = None

    def body(self) -> dict[str, object]:
        """Return the part of a /ready body that names the masters (nothing when all answer)."""
        if not self.down:
            return {}
        return {"masters_down": self.down, "masters_answering": self.answering}


def check_masters(scripts: Scripts, *, count_replicas: bool = False) -> MastersCheck:
    """Check each master the client knows and load our scripts where they are missing.

    One SCRIPT EXISTS per master (a SCRIPT LOAD per script only after a restart or failover
    emptied that master's cache), and with `count_replicas` one INFO replication. A master
    that does not answer is named with the reason.
    """
    client = scripts.redis
    check = MastersCheck()
    counts = []
    try:
        primaries = client.get_primaries()  # type: ignore[attr-defined]
    except MASTER_DOWN as exc:
        # No seed answered yet (shared/redis_conn.py builds the client on first use): no
        # master is known, and the reason names the seeds tried.
        check.down["seeds"] = unavailable_text(exc)
        return check
    for node in primaries:
        name = f"{node.host}:{node.port}"
        try:
            scripts.ensure_loaded_on(node)
            if count_replicas:
                counts.append(durable.replicas_connected(client.get_redis_connection(node))[1])
        except MASTER_DOWN as exc:
            check.down[name] = unavailable_text(exc)
        else:
            check.answering.append(name)
    if count_replicas:
        # The weakest master that answered decides (as durable.replicas_body).
        check.replicas = min(counts, default=0)
    return check
