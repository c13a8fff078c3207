"""Every relative link and every repository path the guides and measurement logs name exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "bench").glob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")
# A path written out in prose, such as docs/JOBS.md or bench/results/soak.json.
NAMED_PATH = re.compile(r"(?<![\w/.-])((?:docs|bench)/[\w./-]+\.(?:md|png|json))")


def _tracked() -> set[str]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return set(out.splitlines())


def test_the_guides_and_logs_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in DOCS}
    assert {"README.md", "docs/README.md", "bench/README.md"} <= names


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(doc: Path) -> None:
    broken = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL or an anchor in the same page
        path = target.split("#", 1)[0]
        if not (doc.parent / path).exists():
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)} links to missing files: {broken}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_docs_or_bench_path_named_in_prose_is_tracked(doc: Path) -> None:
    tracked = _tracked()
    missing = [
        name
        for name in NAMED_PATH.findall(doc.read_text())
        if name.rstrip(".") not in tracked and not (ROOT / name.rstrip(".")).exists()
    ]
    assert not missing, f"{doc.relative_to(ROOT)} names files that do not exist: {missing}"


def test_every_guide_or_log_named_in_the_code_exists() -> None:
    """A comment or docstring naming a guide or a log under docs or bench names a real file."""
    tracked = _tracked()
    missing = set()
    for name in tracked:
        if not name.endswith((".py", ".lua", ".sh", ".conf", ".toml", ".service", ".yaml")):
            continue
        text = (ROOT / name).read_text(errors="replace")
        for named in re.findall(r"(?<![\w/.-])((?:docs|bench)/[A-Za-z_]+\.(?:md|png))", text):
            if named not in tracked:
                missing.add(f"{name}: {named}")
    assert not missing, sorted(missing)
