"""Durations as people write them (``500ms``, ``2s``, ``1m``, ``1h``, ``1d``, bare seconds).

In the model, not in the settings, because jobs and schedules parse them too and the model
reads no settings.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)?")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_parser(*, positive: bool) -> Callable[[str], float]:
    """Return a parser of ``500ms``/``2s``/``1m``/``1h``/``1d``/bare seconds into float seconds."""
    bound = "greater than 0" if positive else "0 or more"
    expected = f"a duration such as 500ms, 2s, 1m, 1h, 1d or bare seconds, {bound}"

    def parse(text: str) -> float:
        match = _DURATION.fullmatch(text)
        if not match:
            raise ValueError(expected)
        seconds = float(match[1]) * _UNIT_SECONDS[match[2] or "s"]
        if positive and seconds <= 0:
            raise ValueError(expected)
        return seconds

    return parse
