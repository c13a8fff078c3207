"""Build one virtualenv per peer under var/bench-venvs/<peer>, with pinned versions.

The peers are benchmark-only dependencies: they never enter requirements.txt. Each venv gets
its peer's pinned packages plus hiredis (TaskForge's own client uses hiredis too, so every
system parses Redis replies the same way). A stamp file records what was installed; a venv
whose stamp matches is reused. ``pip freeze`` of each venv is written beside it and copied
into the results, so every figure names the exact versions it measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENVS = ROOT / "var" / "bench-venvs"
INSTALL_TIMEOUT = 900.0

# The Redis client TaskForge itself runs with (requirements.txt: redis[hiredis]), pinned alike.
CLIENT = ["redis==8.1.0", "hiredis==3.5.0"]
# The versions measured (newest releases on the day these benchmarks were written).
PINS: dict[str, list[str]] = {
    "rq": ["rq==2.12.0", *CLIENT],
    "celery": ["celery[redis]==5.6.3", *CLIENT],
    "dramatiq": ["dramatiq[redis]==2.2.1", *CLIENT],
    "huey": ["huey==3.5.4", *CLIENT],
    # The chart (bench/benchmarks.png) is drawn here, not in TaskForge's own environment.
    "plot": ["matplotlib==3.10.8"],
}


def venv_dir(peer: str) -> Path:
    """Return where `peer`'s virtualenv lives."""
    return VENVS / peer


def python(peer: str) -> Path:
    """Return the interpreter of `peer`'s virtualenv."""
    return venv_dir(peer) / "bin" / "python"


def ensure(peer: str, log=print) -> dict[str, str]:
    """Create or reuse `peer`'s venv; return its installed versions ({name: version})."""
    pins = PINS[peer]
    home = venv_dir(peer)
    stamp = home / "bench-stamp.json"
    want = json.dumps({"pins": pins, "python": sys.version.split()[0]})
    if not (python(peer).exists() and stamp.exists() and stamp.read_text() == want):
        log(f"building {home} ({' '.join(pins)}) ...")
        home.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "venv", "--clear", str(home)], check=True, timeout=120
        )
        subprocess.run(
            [str(python(peer)), "-m", "pip", "install", "-q", "--disable-pip-version-check", *pins],
            check=True,
            timeout=INSTALL_TIMEOUT,
        )
        stamp.write_text(want)
    return freeze(peer)


def freeze(peer: str) -> dict[str, str]:
    """Return {package: version} of `peer`'s venv (and write it beside the venv)."""
    out = subprocess.run(
        [str(python(peer)), "-m", "pip", "freeze", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    (venv_dir(peer) / "freeze.txt").write_text(out)
    versions = {}
    for line in out.splitlines():
        name, sep, version = line.partition("==")
        if sep:
            versions[name.lower()] = version
    return versions
