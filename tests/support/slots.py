"""A guard that fails any script call whose KEYS hash to more than one Redis Cluster slot.

`one_slot(scripts)` wraps the two funnels every script call of shared.engine.scripts.Scripts goes
through (its transport's ``call`` and ``send``; tests/cluster/test_script_slots.py checks that
no call bypasses them) so each call checks its keys before it is sent, on one Redis or a
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

from shared.engine.scripts import Scripts

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
    transport = scripts.transport
    call, send = transport.call, transport.send

    def checked_call(name: str, keys: list[Any], args: list[Any]) -> Any:
        check_keys(name, keys)
        return call(name, keys, args)

    def checked_send(pipe: Any, name: str, keys: list[Any], args: list[Any]) -> None:
        check_keys(name, keys)
        send(pipe, name, keys, args)

    def per_queue_events(k: Any) -> str | None:
        return k.events if scripts.policy.events_cap else None

    scripts._events_key = per_queue_events  # type: ignore[method-assign]
    transport.call = checked_call  # type: ignore[method-assign]
    transport.send = checked_send  # type: ignore[method-assign]
    return scripts
