"""How long the scenarios that are long by design run: full length for the report, shorter in
the suite.

``python -m tests.faults.report`` (the figures of bench/FAULTS.md) runs them at their full
length; bin/test runs them at SUITE_SCALE of it, to stay within the suite's time budget.
TASKFORGE_FAULT_SCALE overrides the factor (``1`` is the full length). Each scenario passes a
floor: the shortest run that still shows what it claims (a floor's reason is beside its use).
"""

from __future__ import annotations

import os

SCALE_ENV = "TASKFORGE_FAULT_SCALE"
FULL_SCALE = 1.0
SUITE_SCALE = 0.5


def fault_scale() -> float:
    """Return the factor from TASKFORGE_FAULT_SCALE (unset: SUITE_SCALE); refuse a nonsense one."""
    raw = os.environ.get(SCALE_ENV, "").strip()
    if not raw:
        return SUITE_SCALE
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{SCALE_ENV}={raw!r} is not a number") from None
    if not 0 < value <= 10:
        raise ValueError(f"{SCALE_ENV}={raw!r} is outside (0, 10]")
    return value


def scaled(full_seconds: float, floor: float) -> float:
    """Return a full-length duration times the scale, never under `floor`."""
    return max(floor, full_seconds * fault_scale())
