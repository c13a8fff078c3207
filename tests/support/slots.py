"""A guard that fails any script call whose KEYS hash to more than one Redis Cluster slot.

`one_slot(scripts)` wraps the three funnels every script call of shared.scripts.Scripts goes
through (``_call``, ``_piped`` and ``_piped_bare``; tests/cluster/test_script_slots.py checks
that no call bypasses them) so each call checks its keys before it is sent, on one Redis or a
cluster alike: the engine tests run with it, so every call site they reach is held to the rule
a cluster enforces. It also lays the events out as on a cluster, one stream per queue
(``Keys.events``): one Redis's one stream for all queues is the single exception to the rule,
and tests/engine/test_events.py tests it apart. `CALLED` records which scripts were called (a
coverage check reads it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from redis.cluster import key_slot

from shared.scripts import Scripts

CALLED: Counter[str] = Counter()


class CrossSlot(AssertionError):
    """A script call named keys of two or more slots."""


def check_keys(name: str, keys: Sequence[Any]) -> None:
    """Raise CrossSlot unless every key of the call hashes to one slot."""
    slots = {key_slot(k.encode() if isinstance(k, str) else bytes(k)) for k in keys}
    if len(slots) > 1:
        raise CrossSlot(f"{name}.lua called with keys of {len(slots)} slots: {list(keys)}")
    CALLED[name] += 1


def one_slot(scripts: Scripts) -> Scripts:
    """Make `scripts` check every call's keys (returns it, for fixtures)."""
    call, piped, bare = scripts._call, scripts._piped, scripts._piped_bare

    def checked_call(name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        check_keys(name, keys)
        return call(name, keys, args)

    def checked_piped(pipe: Any, name: str, keys: Sequence[str], args: Sequence[Any]) -> None:
        check_keys(name, keys)
        piped(pipe, name, keys, args)

    def checked_bare(pipe: Any, name: str, keys: Sequence[str], args: Sequence[Any]) -> None:
        check_keys(name, keys)
        bare(pipe, name, keys, args)

    def per_queue_events(k: Any) -> list[str]:
        return [k.events] if scripts.policy.events_cap else []

    scripts._events_key = per_queue_events  # type: ignore[method-assign]
    scripts._call = checked_call  # type: ignore[method-assign]
    scripts._piped = checked_piped  # type: ignore[method-assign]
    scripts._piped_bare = checked_bare  # type: ignore[method-assign]
    return scripts
