"""Cap one process's CPU with a cgroup of its own (v1 ``cpu`` controller, or v2 ``cpu.max``).

bench.cluster makes Redis the bottleneck on a 2-core machine this way: each redis-server gets
a small share of a core (``cpu.cfs_quota_us`` per ``cpu.cfs_period_us``), so the Python workers
beside it, which cost more CPU per job than Redis does, have CPU to spare. The cgroup's own
``cpu.stat`` counts the periods the process was throttled in: the proof that the cap bit.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
V1_CPU = ROOT / "cpu"  # the v1 hierarchy of the cpu controller (Debian, Docker, Firecracker)
V2_MARK = ROOT / "cgroup.controllers"  # only a v2 (unified) hierarchy has this file
RMDIR_TIMEOUT = 5.0  # seconds for a cgroup to empty once its process exited


@dataclass
class CpuCap:
    """A cgroup holding one process, capped at `percent` of one core per `period_us`."""

    path: Path
    v2: bool

    @classmethod
    def create(cls, name: str, percent: float, period_us: int) -> CpuCap:
        """Make the cgroup and set its cap (cfs quotas below 1 ms are refused by the kernel)."""
        quota_us = int(period_us * percent / 100)
        if quota_us < 1000:
            raise ValueError(f"{percent}% of {period_us} µs is under the 1 ms minimum quota")
        if V2_MARK.exists():
            path = ROOT / name
            path.mkdir()
            (path / "cpu.max").write_text(f"{quota_us} {period_us}\n")
            return cls(path, v2=True)
        if not V1_CPU.is_dir():
            raise RuntimeError("no cgroup cpu controller under /sys/fs/cgroup")
        path = V1_CPU / name
        path.mkdir()
        (path / "cpu.cfs_period_us").write_text(f"{period_us}\n")
        (path / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")
        return cls(path, v2=False)

    def add(self, pid: int) -> None:
        """Move `pid` (all its threads) into the cgroup."""
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def throttled(self) -> tuple[int, int, float]:
        """Return (periods, periods throttled, seconds throttled) so far."""
        stat = dict(
            line.split() for line in (self.path / "cpu.stat").read_text().splitlines() if line
        )
        if self.v2:
            return (
                int(stat["nr_periods"]),
                int(stat["nr_throttled"]),
                int(stat["throttled_usec"]) / 1e6,
            )
        return int(stat["nr_periods"]), int(stat["nr_throttled"]), int(stat["throttled_time"]) / 1e9

    def remove(self) -> None:
        """Delete the cgroup once its process is gone (or moved back to the root)."""
        procs = self.path / "cgroup.procs"
        root_procs = (ROOT if self.v2 else V1_CPU) / "cgroup.procs"
        with contextlib.suppress(OSError):
            for pid in procs.read_text().split():
                root_procs.write_text(f"{pid}\n")
        deadline = time.monotonic() + RMDIR_TIMEOUT
        while True:
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # the kernel frees an emptied cgroup asynchronously


def can_cap() -> str | None:
    """Return why a cgroup cannot be made here, or None when it can."""
    base = ROOT if V2_MARK.exists() else V1_CPU
    if not base.is_dir():
        return "no cgroup cpu controller under /sys/fs/cgroup"
    if not os.access(base, os.W_OK):
        return f"{base} is not writable (run as root, or delegate a cgroup)"
    return None
