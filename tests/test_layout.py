"""The code's layout: which package may import which (docs/ARCHITECTURE.md), and one job per
module name.

Read from the source with ast (no imports run), so a wrong-direction import fails here even
when it sits in a function or under TYPE_CHECKING.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.support.tools import ROOT

PACKAGES = ("shared", "gateway", "workerd", "taskforge")

# shared/'s layers from the ground up: each imports only those before it.
LAYERS = ("model", "settings", "obs", "connect", "engine", "read")

# What each package may import of the project, besides itself. docs/ARCHITECTURE.md shows
# this table; keep the two in step.
ALLOWED: dict[str, set[str]] = {
    **{
        f"shared.{layer}": {f"shared.{below}" for below in LAYERS[:i]}
        for i, layer in enumerate(LAYERS)
    },
    "gateway": {f"shared.{layer}" for layer in LAYERS},
    # workerd reports the release it runs (taskforge.version); nothing else of the client.
    "workerd": {f"shared.{layer}" for layer in LAYERS} | {"taskforge"},
    "taskforge": set(),
}

# Names every package repeats for the same job.
SHARED_NAMES = {"__init__.py", "__main__.py"}


def sources() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def unit_of(module: str) -> str:
    """The package a dotted module belongs to in the table: a shared layer or a top folder."""
    parts = module.split(".")
    if parts[0] == "shared" and len(parts) > 1:
        return f"shared.{parts[1]}"
    return parts[0]


def unit_of_file(path: Path) -> str:
    return unit_of(".".join(path.relative_to(ROOT).with_suffix("").parts))


def imported(path: Path) -> list[tuple[int, str]]:
    """Every project module `path` imports, with its line (``from shared import x`` is shared.x)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if node.module in PACKAGES:
                found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
    return [(line, name) for line, name in found if name.split(".")[0] in PACKAGES]


def test_every_shared_module_lives_in_a_layer() -> None:
    loose = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "shared").glob("*.py")
        if path.name != "__init__.py"
    ]
    layers = sorted(
        path.name for path in (ROOT / "shared").iterdir() if (path / "__init__.py").exists()
    )
    assert loose == [], "move these into one of shared/'s layers (docs/ARCHITECTURE.md)"
    assert layers == sorted(LAYERS)


def test_each_package_imports_only_what_the_table_allows() -> None:
    wrong = []
    for path in sources():
        unit = unit_of_file(path)
        allowed = ALLOWED.get(unit, set()) | {unit}
        for line, name in imported(path):
            target = unit_of(name)
            if target != unit and target not in allowed and name != "shared":
                wrong.append(f"{path.relative_to(ROOT)}:{line} {unit} imports {name}")
    assert wrong == []


def test_the_checker_sees_imports_in_every_form(tmp_path: Path) -> None:
    source = tmp_path / "probe.py"
    source.write_text(
        "from shared import obs\n"
        "import gateway.app\n"
        "def f():\n"
        "    from shared.engine.keys import Keys\n"
        "from . import sibling\n"
        "import os\n"
    )
    assert imported(source) == [
        (1, "shared.obs"),
        (2, "gateway.app"),
        (4, "shared.engine.keys"),
    ]
    assert unit_of("shared.engine.scripts.job_scripts") == "shared.engine"
    assert "shared.read" not in ALLOWED["shared.engine"]
    assert "shared.engine" in ALLOWED["shared.read"]


def test_no_two_modules_share_a_file_name() -> None:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in sources():
        if path.name not in SHARED_NAMES:
            by_name[path.name].append(str(path.relative_to(ROOT)))
    # a package's folder name counts too: a module named like another package's folder reads
    # as that package
    for package in PACKAGES:
        for init in (ROOT / package).rglob("__init__.py"):
            if init.parent != ROOT / package:
                by_name[f"{init.parent.name}.py"].append(str(init.parent.relative_to(ROOT)) + "/")
    repeated = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert repeated == {}
