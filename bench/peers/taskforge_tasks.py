"""The benchmark handler workerd loads (TASKFORGE_HANDLERS=bench.peers.taskforge_tasks).

``bench_stamp`` does what every peer's no-op task does (bench.peers.stamp.record), so TaskForge
is measured by the same method as the peers.
"""

from __future__ import annotations

import time
from typing import Any

from bench.peers.stamp import record
from workerd import JobContext, handler


@handler("bench_stamp")
def bench_stamp(payload: Any, job: JobContext) -> None:
    """Record when the job ran; `payload["sent"]` is when the producer sent it (0: drain)."""
    started = time.time()
    sent = payload.get("sent", 0.0) if isinstance(payload, dict) else 0.0
    record(float(sent), started)
