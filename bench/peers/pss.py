"""Memory of a whole system under test: PSS summed over a process tree, sampled in a thread.

PSS (proportional set size, /proc/<pid>/smaps_rollup) charges each shared page to the
processes sharing it in equal parts, so the sum over a pre-fork supervisor and its children
counts the pages they share once, where RSS would count them once per process. The tree is
every process started for a system (its process groups' leaders) and all their descendants,
found afresh at each sample: workers a supervisor restarts, or RQ's per-job work horses, are
counted while they live.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

PROC = Path("/proc")
SAMPLE_INTERVAL = 0.2  # seconds between samples; a 1,000-job drain lasts about one second


def pss_kib(pid: int, proc: Path = PROC) -> int | None:
    """Return a process's PSS in KiB, or None when it has exited (or cannot be read)."""
    try:
        text = (proc / str(pid) / "smaps_rollup").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    for line in text.splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return None


def children(pid: int, proc: Path = PROC) -> list[int]:
    """Return the pids of a process's children (every thread's /proc children list)."""
    kids: list[int] = []
    try:
        tasks = list((proc / str(pid) / "task").iterdir())
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return kids
    for task in tasks:
        try:
            kids.extend(int(p) for p in (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return kids


def tree(roots: Iterable[int], proc: Path = PROC) -> set[int]:
    """Return the roots and all their living descendants."""
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        todo.extend(children(pid, proc))
    return seen


def tree_pss_kib(roots: Iterable[int], proc: Path = PROC) -> tuple[int, int]:
    """Return (PSS KiB summed over the tree, processes counted)."""
    total = counted = 0
    for pid in tree(roots, proc):
        kib = pss_kib(pid, proc)
        if kib is not None:
            total += kib
            counted += 1
    return total, counted


class Sampler:
    """Sample a process tree's PSS every SAMPLE_INTERVAL s until stop(); keep the maximum."""

    def __init__(self, roots: Callable[[], Iterable[int]], interval: float = SAMPLE_INTERVAL):
        self.roots = roots
        self.interval = interval
        self.samples: list[tuple[int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pss-sampler", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            self.samples.append(tree_pss_kib(self.roots()))
            if self._stop.wait(self.interval):
                return

    def stop(self) -> dict[str, float | int]:
        """Take a last sample (the processes are still running), stop; return the summary."""
        self._stop.set()
        self._thread.join(timeout=10)
        self.samples.append(tree_pss_kib(self.roots()))
        peak_kib, processes = max(self.samples)
        return {
            "pss_mb": round(peak_kib / 1024, 1),
            "pss_processes": processes,
            "pss_samples": len(self.samples),
        }


def readable() -> bool:
    """Return whether this machine exposes smaps_rollup (Linux ≥ 4.14) for our own process."""
    return pss_kib(os.getpid()) is not None
