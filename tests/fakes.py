"""Test doubles for fast unit tests above the scripts (never the only proof of a script)."""

from __future__ import annotations

import fakeredis

from shared.keys import Keys
from shared.scripts import Policy, Scripts


class FakeScripts(Scripts):
    """Scripts on fakeredis, whose Lua runner does not understand the `#!lua` flags line."""

    def _source(self, name: str) -> str:
        return super()._source(name).split("\n", 1)[1]


def fake_scripts(policy: Policy | None = None) -> FakeScripts:
    """Return engine scripts bound to a fresh in-memory fakeredis server."""
    return FakeScripts(fakeredis.FakeRedis(), Keys(), policy or Policy())
