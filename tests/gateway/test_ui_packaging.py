"""The dashboard's templates and assets ship with the package (an installed gateway serves
them with no checkout and no network)."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UI = ROOT / "gateway" / "ui"


def shipped_files() -> list[Path]:
    """Return every file under the dashboard's templates/ and static/."""
    return sorted(p for d in ("templates", "static") for p in (UI / d).rglob("*") if p.is_file())


def test_package_data_names_every_template_and_asset() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    globs = cfg["options.package_data"]["gateway"].split()
    gateway = ROOT / "gateway"
    covered = {path for pattern in globs for path in gateway.glob(pattern)}
    files = shipped_files()
    assert files, "the dashboard has templates and assets"
    assert [f.relative_to(ROOT) for f in files if f not in covered] == []


def test_the_sdist_manifest_takes_them_too() -> None:
    manifest = (ROOT / "MANIFEST.in").read_text()
    assert "recursive-include gateway/ui/templates *.html" in manifest
    assert "recursive-include gateway/ui/static *.css *.js" in manifest
    assert {f.suffix for f in shipped_files()} <= {".html", ".css", ".js"}
