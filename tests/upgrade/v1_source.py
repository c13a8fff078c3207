"""Where the vendored v1 scripts (tests/upgrade/v1_lua/) come from, and how to make them again.

Layout v1's scripts are those of commit a05e74a (the last before named queues), assembled with
that commit's includes as v1 ran them. They are kept as files so the tests need no git history
(a shallow clone has none); ``python -m tests.upgrade.v1_source`` writes them again from git,
and a test checks them against git where the commit is there.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from shared.lua_source import INCLUDE, definitions, used

V1_COMMIT = "a05e74a"
V1_SCRIPTS = ("enqueue", "claim", "complete", "fail", "cancel", "promote", "recover")
DIRECTORY = Path(__file__).resolve().parent / "v1_lua"
ROOT = Path(__file__).resolve().parents[2]


def git_show(path: str) -> str:
    """Return a file of the v1 commit (raises CalledProcessError when git lacks it)."""
    return subprocess.run(
        ["git", "show", f"{V1_COMMIT}:{path}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def assemble_v1(name: str) -> str:
    """Return a v1 script as v1 ran it: each include replaced by the definitions it uses."""
    source = git_show(f"shared/lua/{name}.lua")
    included = {
        match: definitions(match, git_show(f"shared/lua/includes/{match}.lua"))
        for match in INCLUDE.findall(source)
    }
    everything = [d for found in included.values() for d in found]
    keep = {id(d) for d in used(INCLUDE.sub("", source), everything)}

    def include(match: re.Match[str]) -> str:
        kept = [d.text for d in included[match.group(1)] if id(d) in keep]
        return "".join(kept).rstrip("\n")

    return INCLUDE.sub(include, source)


def write() -> None:
    """Write every vendored v1 script from git."""
    DIRECTORY.mkdir(exist_ok=True)
    for name in V1_SCRIPTS:
        (DIRECTORY / f"{name}.lua").write_text(assemble_v1(name))


if __name__ == "__main__":
    write()
