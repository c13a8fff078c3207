"""A script's KEYS and ARGV by name, read once from its Lua header.

Every script's header lists its keys and arguments (docs: shared/engine/lua/*.lua)::

    -- KEYS[1] -> {prefix}pending          zset, ...
    -- KEYS[2..n] -> jobs: {prefix}job:<id>  the jobs whose leases to extend
    -- ARGV[5] -> now_ms: now (ms) override, or '' for Redis TIME

A key is named by its pattern's last fixed part (``{prefix}job:<id>`` is ``job``,
``{ns:queue}:v2:<state>`` is ``state``) unless the line names it (``jobs:``); an argument
always names itself. A ``[i..n]`` entry is a variadic tail: its value is a sequence, spread.

Callers pass every name (:meth:`Signature.bind`): a missing or unknown one raises, so a call
that drifts from its script's header fails on its first use, not with a wrong key in Redis.
A value of None is "not sent": allowed only at the end of the keys or of the arguments (the
events stream and its cap are absent with events off; enqueue's optional last arguments).
The name-to-position mapping is worked out here once per script, so a call costs one dict
lookup per name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

ENTRY = re.compile(r"^-- (KEYS|ARGV)\[(\d+)(\.\.n)?\]\s*-> (\S+)")
NAMED = re.compile(r"^([a-z_][a-z0-9_]*):$")
PLACEHOLDER = re.compile(r"^<([a-z_]+)>$")


@dataclass(frozen=True)
class Signature:
    """The names of one script's KEYS and ARGV, in order; the last of each may be variadic."""

    script: str
    keys: tuple[str, ...]
    args: tuple[str, ...]
    variadic_keys: bool = False
    variadic_args: bool = False

    def bind(self, named: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        """Return (KEYS, ARGV) for a call given every name of this signature."""
        if len(named) != len(self.keys) + len(self.args):
            self._refuse(named)
        try:
            keys = [named[name] for name in self.keys]
            args = [named[name] for name in self.args]
        except KeyError:
            self._refuse(named)
        return (
            _positional(keys, self.variadic_keys, self.script),
            _positional(args, self.variadic_args, self.script),
        )

    def _refuse(self, named: dict[str, Any]) -> None:
        expected = {*self.keys, *self.args}
        missing, unknown = sorted(expected - named.keys()), sorted(named.keys() - expected)
        raise TypeError(f"{self.script}.lua call: missing {missing}, unknown {unknown}")


def _positional(values: list[Any], variadic: bool, script: str) -> list[Any]:
    """Spread a variadic tail and drop the trailing values not sent (None)."""
    if variadic:
        tail = values.pop()
        values.extend(tail)
    while values and values[-1] is None:
        values.pop()
    if None in values:
        raise ValueError(f"{script}.lua call: only trailing values may be left out (None)")
    return values


def parse(script: str, source: str) -> Signature:
    """Read a script's signature from its header; raise ValueError on a malformed one."""
    found: dict[str, list[tuple[int, str, bool]]] = {"KEYS": [], "ARGV": []}
    for line in source.splitlines():
        match = ENTRY.match(line)
        if match:
            kind, index, tail, first = match.groups()
            found[kind].append((int(index), _name(kind, first, script), bool(tail)))
    keys, variadic_keys = _ordered(script, "KEYS", found["KEYS"])
    args, variadic_args = _ordered(script, "ARGV", found["ARGV"])
    clash = set(keys) & set(args)
    if clash:
        raise ValueError(f"{script}.lua: a key and an argument share a name: {sorted(clash)}")
    return Signature(script, keys, args, variadic_keys, variadic_args)


def _name(kind: str, first: str, script: str) -> str:
    named = NAMED.match(first)
    if named:
        return named.group(1)
    if kind == "ARGV":
        raise ValueError(f"{script}.lua: ARGV entry without a name: {first!r}")
    parts = first.split("}", 1)[-1].split(":")
    fixed = [part for part in parts if part and part != "v2" and not PLACEHOLDER.match(part)]
    if fixed:
        return fixed[-1]
    placeholder = PLACEHOLDER.match(parts[-1])
    if not placeholder:
        raise ValueError(f"{script}.lua: cannot name the key {first!r}")
    return placeholder.group(1)


def _ordered(
    script: str, kind: str, entries: Sequence[tuple[int, str, bool]]
) -> tuple[tuple[str, ...], bool]:
    """Check the entries run 1..n without gaps or repeats, a variadic one last."""
    indexes = [index for index, _, _ in entries]
    if indexes != list(range(1, len(entries) + 1)):
        raise ValueError(f"{script}.lua: {kind} entries out of order: {indexes}")
    names = [name for _, name, _ in entries]
    if len(set(names)) != len(names):
        raise ValueError(f"{script}.lua: {kind} names repeat: {names}")
    if any(tail for _, _, tail in entries[:-1]):
        raise ValueError(f"{script}.lua: only the last {kind} entry may be variadic")
    return tuple(names), bool(entries and entries[-1][2])
