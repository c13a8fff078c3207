"""The benchmark handler workerd loads (TASKFORGE_HANDLERS=bench.peers.taskforge_tasks).

``bench_stamp`` runs the body every peer's task runs (bench.peers.stamp.body: no-op, or
I/O-bound with BENCH_IO_WAIT_MS), so TaskForge is measured by the same method as the peers.
"""

from __future__ import annotations

from typing import Any

from bench.peers.stamp import body
from workerd import JobContext, handler


@handler("bench_stamp")
def bench_stamp(payload: Any, job: JobContext) -> None:
    """Run the benchmark body; `payload["sent"]` is when the producer sent it (0: drain)."""
    sent = payload.get("sent", 0.0) if isinstance(payload, dict) else 0.0
    body(float(sent))
