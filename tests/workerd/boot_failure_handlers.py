"""A handler module that makes every child of the supervisor die at boot (exit code 1).

Imported by the supervisor before it forks (TASKFORGE_HANDLERS), so the hook runs in each
forked child before it can beat once: the supervisor must halt (exit 3), not crash-loop.
"""

from __future__ import annotations

import os

os.register_at_fork(after_in_child=lambda: os._exit(1))
