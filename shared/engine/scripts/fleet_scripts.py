"""The workerd hosts' registry: each host's heartbeat, and an operator's quiet request."""

from __future__ import annotations

from shared.engine.engine_types import Code, HostBeat, HostNotFound
from shared.engine.replies import text
from shared.engine.scripts.script_base import ScriptsBase, now_arg


class FleetCalls(ScriptsBase):
    """The calls of workerd's registry duty and of the hosts' operator actions."""

    def heartbeat(
        self,
        worker_id: str,
        fields: dict[str, str | int],
        ttl_ms: int,
        *,
        leaving: bool = False,
        quiet: bool = False,
        quiet_by_signal: bool = False,
        now_ms: int | None = None,
    ) -> HostBeat:
        """Record a live workerd host (or its departure); return live hosts and its quiet state.

        `quiet` is the supervisor's state; a request quiet_host left in the record since the
        previous heartbeat replaces it, unless `quiet_by_signal` (a signal set it since then).
        The hosts' events stream always goes with it, its cap 0 when events are off.
        """
        k = self.keys
        live, state = self.transport.run(
            "heartbeat",
            workers=k.workers,
            worker=k.worker(worker_id),
            events=k.fleet_events,
            worker_id=worker_id,
            ttl_ms=ttl_ms,
            leaving="1" if leaving else "0",
            now_ms=now_arg(now_ms),
            quiet="1" if quiet else "0",
            quiet_by_signal="1" if quiet_by_signal else "0",
            events_cap=self.policy.events_cap,
            fields=[item for pair in fields.items() for item in pair],
        )
        return HostBeat(int(live), text(state) == "1")

    def quiet_host(self, name: str, quiet: bool) -> bool | None:
        """Ask a workerd host to claim nothing more (or again); raise HostNotFound.

        Returns the quiet state the host applied last (None before its first report of one):
        the host applies the request at its next registry heartbeat.
        """
        reply = self.transport.run(
            "quiet_host", worker=self.keys.worker(name), quiet="1" if quiet else "0"
        )
        if reply[0] == Code.NOT_FOUND:
            raise HostNotFound(name)
        applied = text(reply[1]) if len(reply) > 1 else None
        return None if applied is None else applied == "1"
