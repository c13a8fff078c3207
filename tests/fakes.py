"""Test doubles for fast unit tests above the scripts (never the only proof of a script)."""

from __future__ import annotations

import fakeredis

from shared.engine_types import Policy
from shared.keys import Keys
from shared.scripts import Scripts


class FakeScripts(Scripts):
    """Scripts on fakeredis, whose Lua runner does not understand the `#!lua` flags line."""

    def _source(self, name: str) -> str:
        return super()._source(name).split("\n", 1)[1]


def fake_scripts(policy: Policy | None = None) -> FakeScripts:
    """Return engine scripts bound to a fresh in-memory fakeredis server."""
    return FakeScripts(fakeredis.FakeRedis(), Keys(), policy or Policy())


class IdleSlot:
    """The shared-memory slot a worker or scheduler reports to, reduced to what they call.

    A process stepped in a test has no supervisor reading its slot, so each report is dropped,
    and none asks anything of it (no Control: no cancel, no drain).
    """

    control = None

    def beat(self) -> None:
        pass

    def start_job(
        self, job_id: str, token: int, timeout: float, queue: str = "", job_type: str = ""
    ) -> float:
        return 0.0
