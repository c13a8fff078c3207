"""The ``taskforge`` command line, built on ``taskforge.Client`` alone (docs/CLI.md).

app.py holds the group, the global options and the exit codes; jobs.py, dlq.py, ops.py and
schedules.py the commands; render.py the human tables.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

from taskforge.cli import dlq, jobs, limits, ops, schedules  # noqa: F401  (each registers its commands)
from taskforge.cli.app import Exit, cli, json_everywhere, run

json_everywhere(cli)  # after every command is registered

__all__ = ["Exit", "cli", "main", "run"]


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Run ``taskforge`` (the console script's entry point) and exit with its status."""
    sys.exit(run(argv))
