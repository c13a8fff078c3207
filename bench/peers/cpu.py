"""CPU of a whole system under test: user + system time summed over a process tree.

Read from /proc/<pid>/stat (utime, stime, and cutime, cstime: the children a process has
reaped, such as RQ's work horses) for every process of the tree pss.tree finds. A process
that exits unreaped between two readings takes its time with it; in a drain none does.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from bench.peers import pss
from tests.support import tools

TICKS = os.sysconf("SC_CLK_TCK")  # the stat file's unit (tools.cpu_seconds divides by it)


def cpu_seconds(pid: int, proc: Path = pss.PROC) -> float | None:
    """Return a process's CPU seconds so far, its reaped children's included; None once gone."""
    try:
        return tools.cpu_seconds(pid, children=True, proc=proc)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def tree_cpu_seconds(roots: Iterable[int], proc: Path = pss.PROC) -> float:
    """Return the CPU seconds of the roots and all their living descendants."""
    return sum(cpu_seconds(pid, proc) or 0.0 for pid in pss.tree(roots, proc))
