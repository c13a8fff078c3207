"""The ``taskforge`` command line, built on ``taskforge.Client`` alone (docs/CLI.md).

command_group.py holds the group, the global options and the exit codes; job_commands.py,
dlq_commands.py, ops_commands.py, limit_commands.py and schedule_commands.py the commands;
render.py the human tables.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import NoReturn

from taskforge.cli import (  # noqa: F401  (each registers its commands)
    dlq_commands,
    job_commands,
    limit_commands,
    ops_commands,
    schedule_commands,
)
from taskforge.cli.command_group import Exit, cli, json_everywhere, run

json_everywhere(cli)  # after every command is registered

__all__ = ["Exit", "cli", "main", "run"]


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Run ``taskforge`` (the console script's entry point) and exit with its status."""
    sys.exit(run(argv))
