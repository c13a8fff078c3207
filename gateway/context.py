"""What the views share: the settings and the engine, one set per process."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import redis
from flask import current_app

from gateway.fleet_view import FleetView
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.read.directory import QueueDirectory
from shared.read.fleet import read_fleet
from shared.settings.config import Settings


@dataclass(frozen=True)
class Gateway:
    """The per-process engine handle stored in ``app.extensions``."""

    EXTENSION: ClassVar[str] = "taskforge"

    settings: Settings
    scripts: Scripts
    directory: QueueDirectory = field(init=False)
    fleet: FleetView = field(init=False)  # for enqueue warnings: no Redis command per job

    def __post_init__(self) -> None:
        object.__setattr__(self, "directory", QueueDirectory(self.scripts))
        object.__setattr__(self, "fleet", FleetView(lambda: read_fleet(self.redis, self.keys)))

    @property
    def redis(self) -> redis.Redis:
        """Return the process's Redis client."""
        return self.scripts.redis

    @property
    def keys(self) -> Keys:
        """Return the key builder."""
        return self.scripts.keys


def gateway() -> Gateway:
    """Return the current app's Gateway."""
    return current_app.extensions[Gateway.EXTENSION]
