"""What every group of script calls shares: the transport, key builders, policy, events."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from functools import cache
from typing import Any

import redis

from shared.engine.engine_types import Policy
from shared.engine.events import per_queue_streams
from shared.engine.keys import Keys
from shared.engine.lua_source import assemble
from shared.engine.scripts.script_transport import ScriptTransport

SCRIPT_NAMES = (
    "reserve",
    "reserve_batch",
    "enqueue",
    "claim",
    "claim_batch",
    "renew",
    "complete",
    "complete_batch",
    "fail",
    "promote",
    "recover",
    "release",
    "release_worker",
    "replay",
    "cancel",
    "cancel_running",
    "purge",
    "trim",
    "throughput",
    "heartbeat",
    "queue_stats",
    "fleet",
    "list_page",
    "pause_queue",
    "resume_queue",
    "quiet_host",
    "set_limits",
    "open_gates",
    "advance_schedule",
    "pause_schedule",
    "resume_schedule",
    "publish_schedules",
    "delete_queue",
)
# Hashes of canceled jobs outlive their index entry by this much: trim.lua deletes both at
# retention; the TTL only matters if trimming stopped (no scheduler running). Completed jobs
# have no TTL (bounded by trim's count cap alone: an expires entry per job costs memory).
HASH_TTL_MARGIN_MS = 5 * 60 * 1000


@cache
def load_source(name: str) -> str:
    """Return a script's Lua as Redis runs it: includes expanded to the definitions it uses."""
    return assemble(name)


def now_arg(now_ms: int | None) -> str:
    """Return the scripts' now override argument: '' lets the script read Redis TIME."""
    return "" if now_ms is None else str(int(now_ms))


def new_request_id() -> str:
    """Return a fresh request id: a script answers a repeat of the same id as the first call."""
    return secrets.token_hex(8)


class ScriptsBase:
    """The state each group of calls (shared.engine.scripts.job_scripts, .queues, …) reads."""

    def __init__(self, client: redis.Redis, keys: Keys | None = None, policy: Policy | None = None):
        self.redis = client
        self.keys = keys or Keys()
        self.policy = policy or Policy()
        sources = {name: self._source(name) for name in SCRIPT_NAMES}
        self.transport = ScriptTransport(client, sources, self.policy, self.keys.durable_marker)

    def _source(self, name: str) -> str:
        """Return the Lua to register for a script (a test double may adapt it)."""
        return load_source(name)

    def load(self) -> None:
        """Load every script into Redis now, so a broken script fails start-up, not a job."""
        self.transport.load()

    def ensure_loaded(self) -> bool:
        """Load the scripts if Redis lacks any; return whether they were all there already."""
        return self.transport.ensure_loaded()

    def ensure_loaded_on(self, node: Any) -> bool:
        """ensure_loaded on one cluster master (`node`, a redis-py ClusterNode) only.

        A cluster's readiness checks each master apart (shared.engine.cluster_health): one that fails
        over must not hide that the others answer.
        """
        return self.transport.ensure_loaded_on(node)

    def execute_loaded(self, build: Callable[[], Any]) -> list[Any]:
        """Execute the pipeline `build()` makes; rebuilt and run again after NOSCRIPT.

        Only for pipelines of calls that change nothing when repeated: with NOSCRIPT on one
        call, the calls before it in a non-transaction pipeline did run.
        """
        return self.transport.execute(build)

    def q(self, queue: str) -> Keys:
        """Return the key builder of one queue (the global keys are the same on every one)."""
        return self.keys.for_queue(queue)

    def _events_key(self, k: Keys) -> str | None:
        """Return a script's events stream key, or None (not sent) with events off.

        One Redis (and Sentinel) enforces no slots: every queue writes the one stream
        (``Keys.fleet_events``), so a reader's cursor is one id. A Redis Cluster script touches
        one slot, so there each queue writes its own (``Keys.events``; docs/EVENTS.md).
        """
        if not self.policy.events_cap:
            return None
        return k.events if per_queue_streams(self.redis) else k.fleet_events

    def _events_cap(self) -> int | None:
        """Return a script's events cap argument, or None (not sent) with events off.

        Off, the scripts get neither the key nor the cap, and write nothing: each costs Redis
        about 1 % of a job's instructions to receive (bench.events_cost), so off is as before.
        """
        return self.policy.events_cap or None

    def _finished_ttl_ms(self) -> int:
        return self.policy.finished_retention_ms + HASH_TTL_MARGIN_MS
