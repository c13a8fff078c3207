"""Layout v1 as v1 ran it: its scripts (tests/upgrade/v1_lua/, from commit a05e74a) called with
its keys and arguments, so tests make v1 data as an old gateway and an old workerd did, and run
old processes beside an upgrade."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any

import redis

from shared.engine_types import Code, Policy
from shared.jobs import EnqueueRequest, validate_enqueue
from shared.keys import V1Keys
from tests.upgrade.v1_source import DIRECTORY, V1_SCRIPTS


def v1_canonical(request: EnqueueRequest) -> str:
    """Return v1's canonical request: v2's without the queue (v1 had none)."""
    body = json.loads(request.canonical())
    del body["queue"]
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Claimed:
    """What a v1 claim gave its worker."""

    job_id: str
    token: int


class V1:
    """Calls v1's scripts on a Redis, as v1's shared.scripts did."""

    def __init__(
        self, client: redis.Redis, keys: V1Keys | None = None, policy: Policy | None = None
    ):
        self.redis = client
        self.keys = keys or V1Keys()
        self.policy = policy or Policy()
        self._scripts = {
            name: client.register_script((DIRECTORY / f"{name}.lua").read_text())
            for name in V1_SCRIPTS
        }

    def _call(self, name: str, keys: list[str], args: list[Any]) -> Any:
        return self._scripts[name](keys=keys, args=args)

    def enqueue(
        self,
        job_id: str,
        body: dict[str, Any],
        *,
        key: str | None = None,
        now_ms: int | None = None,
    ) -> list[Any]:
        """Enqueue a job from a request body (its `queue`, v1 had none, must be absent)."""
        request = validate_enqueue(body)
        k = self.keys
        digest = hashlib.sha256(v1_canonical(request).encode()).hexdigest() if key else ""
        return self._call(
            "enqueue",
            [k.job(job_id), k.state_index("pending"), k.pending_since, k.seq,
             f"{k.prefix}wake", k.state_index("scheduled"), k.idempotency(key or "")],
            [job_id, request.type, request.payload_json, request.priority, request.max_retries,
             "" if request.scheduled_at_ms is None else request.scheduled_at_ms,
             "" if request.timeout is None else repr(request.timeout),
             digest, self.policy.idempotency_ttl_ms, self.policy.wake_cap, _now(now_ms),
             k.job_prefix, ""],
        )  # fmt: skip

    def claim(self, worker_id: str, *, now_ms: int | None = None) -> Claimed | None:
        """Claim the best pending job for a worker."""
        k = self.keys
        reply = self._call(
            "claim",
            [k.state_index("pending"), k.pending_since, k.state_index("processing"),
             f"{k.prefix}claim:{worker_id}", f"{k.prefix}wake"],
            [k.job_prefix, worker_id, self.policy.lease_ms, random.getrandbits(64), _now(now_ms)],
        )  # fmt: skip
        if reply[0] != Code.DONE:
            return None
        return Claimed(reply[1].decode(), int(reply[9]))

    def complete(self, job_id: str, token: int, *, now_ms: int | None = None) -> Code:
        """Complete a job with the result ``{"ok": true}``."""
        k = self.keys
        reply = self._call(
            "complete",
            [k.job(job_id), k.state_index("processing"), k.state_index("completed"),
             k.state_index("pending"), k.pending_since, f"{k.prefix}wake"],
            [token, '{"ok":true}', _now(now_ms), k.job_prefix, "", self.policy.lease_ms],
        )  # fmt: skip
        return Code(reply[0])

    def fail(
        self, job_id: str, token: int, *, permanent: bool = False, now_ms: int | None = None
    ) -> Code:
        """Fail an execution: retrying, or dead when attempts are spent (or `permanent`)."""
        k, p = self.keys, self.policy
        reply = self._call(
            "fail",
            [k.job(job_id), k.state_index("processing"), k.state_index("retrying"),
             k.state_index("dead")],
            [token, "Boom: it broke", p.retry_base_ms, p.retry_max_ms, 0, 0.5,
             "1" if permanent else "0", p.dlq_max_age_ms, _now(now_ms),
             'Traceback (most recent call last):\n  File "h.py", line 1\nBoom: it broke\n'],
        )  # fmt: skip
        return Code(reply[0])

    def cancel(self, job_id: str, *, now_ms: int | None = None) -> Code:
        """Cancel a job that has not started."""
        k = self.keys
        reply = self._call(
            "cancel",
            [k.job(job_id), k.state_index("pending"), k.pending_since,
             k.state_index("scheduled"), k.state_index("retrying"), k.state_index("canceled")],
            [self.policy.finished_retention_ms + 300_000, _now(now_ms), "req-" + job_id],
        )  # fmt: skip
        return Code(reply[0])


def _now(now_ms: int | None) -> str:
    return "" if now_ms is None else str(now_ms)
