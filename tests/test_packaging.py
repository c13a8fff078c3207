"""Project tooling: dependency lists in step, scripts that parse and can be executed."""

from __future__ import annotations

import configparser
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.tools import require_tool

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ["bin/test", "bin/run", "bin/_common.sh", ".ci/run"]


def requirement_lines(path: Path) -> list[str]:
    """Return the requirement lines of a requirements file, without comments and includes."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("-")]


def test_test_extra_matches_requirements_test() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    extra = cfg["options.extras_require"]["test"].split()
    listed = requirement_lines(ROOT / "requirements-test.txt")
    # honcho runs Procfile checks only; it is no dependency of the package's test extra.
    assert extra == [line for line in listed if not line.startswith("honcho")]


def test_install_requires_is_read_from_requirements_txt() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    assert cfg["options"]["install_requires"].strip() == "file: requirements.txt"
    assert requirement_lines(ROOT / "requirements.txt")


@pytest.mark.parametrize("script", SCRIPTS)
def test_shell_scripts_parse(script: str) -> None:
    subprocess.run([require_tool("bash"), "-n", str(ROOT / script)], check=True)


@pytest.mark.parametrize("script", ["bin/test", "bin/run", ".ci/run"])
def test_entry_scripts_are_executable(script: str) -> None:
    assert os.access(ROOT / script, os.X_OK)
