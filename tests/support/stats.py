"""The one percentile definition of every figure we publish (bench/BENCHMARKS.md and
docs/RELIABILITY.md alike): nearest rank.

Nearest rank always answers a value that was measured (no interpolated latency nobody saw),
and the p-th percentile is the smallest value with at least p % of the sample at or below it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], share: float) -> float | None:
    """Return the `share` (0..1) quantile of `values` by nearest rank; None when empty."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be within 0..1, not {share!r}")
    if not values:
        return None
    ordered = sorted(values)
    # round() first: 0.07 * 100 is 7.000000000000001 in binary floating point, not 7.
    rank = math.ceil(round(share * len(ordered), 9))
    return ordered[max(rank, 1) - 1]
