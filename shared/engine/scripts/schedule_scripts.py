"""Periodic schedules: publish their definitions, pause and resume one, advance its tick."""

from __future__ import annotations

from collections.abc import Sequence

from shared.engine.engine_types import Code, QueuePause, ScheduleNotFound
from shared.engine.scripts.script_base import ScriptsBase, now_arg


class ScheduleCalls(ScriptsBase):
    """The calls of the scheduler's periodic duty and of the schedules' operator actions."""

    def advance_schedule(
        self, name: str, tick_ms: int, job_id: str | None, *, missed: int = 0, jobs: int = 0
    ) -> bool:
        """Move a schedule's last tick up to `tick_ms` (never back); return whether it moved.

        `job_id`: the job enqueued for that tick (None: none was); `missed`: due ticks that got
        no job; `jobs`: jobs enqueued for the ticks up to it. The counts are added only by the
        call that moves it (docs/SCHEDULES.md).
        """
        reply = self.transport.run(
            "advance_schedule",
            schedule=self.keys.schedule(name),
            tick_ms=tick_ms,
            job_id=job_id or "",
            missed=missed,
            jobs=jobs,
        )
        return reply[1] == 1

    def pause_schedule(self, name: str, *, now_ms: int | None = None) -> QueuePause:
        """Pause a published schedule: its ticks pass without jobs; raise ScheduleNotFound."""
        reply = self._toggle("pause_schedule", name, now_ms)
        return QueuePause(since_ms=int(reply[1]), changed=reply[2] == 1)

    def resume_schedule(self, name: str, *, now_ms: int | None = None) -> bool:
        """Resume a schedule from its next tick; return whether it was paused."""
        return self._toggle("resume_schedule", name, now_ms)[1] == 1

    def _toggle(self, script: str, name: str, now_ms: int | None) -> list[int]:
        reply = self.transport.run(
            script,
            schedules=self.keys.schedules,
            schedule=self.keys.schedule(name),
            name=name,
            now_ms=now_arg(now_ms),
        )
        if reply[0] == Code.NOT_FOUND:
            raise ScheduleNotFound(name)
        return reply

    def publish_schedules(self, definitions: Sequence[tuple[str, str]]) -> int:
        """Replace the published schedule definitions with these (name, JSON) pairs."""
        reply = self.transport.run(
            "publish_schedules",
            schedules=self.keys.schedules,
            definitions=[item for pair in definitions for item in pair],
        )
        return int(reply[1])
