"""The client package imports without cycles, whichever of its modules a program imports first.

A cycle (the package's ``__init__`` imports the client, which imports the transport, which took
a name from the package's ``__init__``) works only while every line stays in its place: moving
one import breaks whoever imports a module first that nobody tried first.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "taskforge"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_only(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def import_time_imports(path: Path) -> set[str]:
    """Return the client modules whose names `path` needs while it is being imported.

    ``from pkg import sub`` needs the submodule, not the package's namespace; a package's own
    ``__init__`` running before its submodules is Python's order, no cycle of ours.
    """
    needed: set[str] = set()
    pending = list(ast.parse(path.read_text()).body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and not _type_checking_only(node):
            pending.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            pending.extend(node.body + node.orelse + node.finalbody)
        elif isinstance(node, ast.Import):
            needed.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                needed.add(submodule if submodule in MODULES else node.module)
    return {name for name in needed if name in MODULES}


def test_the_client_modules_import_one_another_without_a_cycle() -> None:
    graph = {name: import_time_imports(path) for name, path in MODULES.items()}
    done: set[str] = set()

    def visit(name: str, trail: list[str]) -> None:
        if name in trail:
            pytest.fail("import cycle: " + " -> ".join([*trail[trail.index(name) :], name]))
        if name in done:
            return
        for needed in sorted(graph[name]):
            visit(needed, [*trail, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_the_check_sees_a_cycle(tmp_path: Path) -> None:
    """The graph above is built from real import lines: the old transport line is an edge."""
    module = tmp_path / "transport.py"
    module.write_text("from taskforge import __version__\nfrom taskforge.errors import api_error\n")
    assert import_time_imports(module) == {"taskforge", "taskforge.errors"}


@pytest.mark.parametrize("first", sorted(MODULES))
def test_each_module_imports_first_in_a_fresh_interpreter(first: str) -> None:
    # Then every other one, so a module that only imports once its neighbours have is caught.
    others = [name for name in sorted(MODULES) if name != first]
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    subprocess.run([sys.executable, "-c", code, first, *others], cwd=ROOT, check=True, timeout=60)
