"""Test doubles for fast unit tests above the scripts (never the only proof of a script)."""

from __future__ import annotations

import fakeredis

from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts


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

    def beat_if_idle(self) -> None:
        pass

    def start_job(
        self, job_id: str, token: int, timeout: float, queue: str = "", job_type: str = ""
    ) -> float:
        return 0.0

    def handler_returned(self, write_limit: float) -> None:
        pass


class FakeClock:
    """A monotonic clock a test moves; its `sleep` moves it too, and records each sleep.

    Give both to a process under test (clock=, sleep=) and its waits take no time.
    """

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
