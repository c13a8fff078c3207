"""Project tooling and packaging: dependency lists in step, scripts that parse and can be
executed, and what each install puts into a fresh virtualenv.

The client is the repository's one distribution (pyproject.toml): `pip install ./` gives a
producer the `taskforge` package and command with urllib3 and click, nothing of the server.
The server runs from its checkout: bin/venv makes its venv, which finds the checkout by a .pth,
so a handler package installed there imports workerd.
"""

from __future__ import annotations

import email
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support.tools import require_tool

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ["bin/test", "bin/run", "bin/venv", "bin/_common.sh", ".ci/run"]
INSTALL_TIMEOUT = 600.0  # seconds for pip, from the package index or its cache
RUN_TIMEOUT = 60.0
SERVER_PACKAGES = {"shared", "gateway", "workerd"}


def requirement_lines(path: Path) -> list[str]:
    """Return the requirement lines of a requirements file, without comments and includes."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("-")]


def client_dependencies() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


def test_the_client_declares_urllib3_and_click_as_requirements_txt_pins_them() -> None:
    declared = client_dependencies()
    assert [re.split(r"[<>=!~\[]", d)[0] for d in declared] == ["urllib3", "click"]
    assert set(declared) <= set(requirement_lines(ROOT / "requirements.txt"))


def test_the_test_requirements_include_the_runtime_and_the_tracing_lists() -> None:
    lines = (ROOT / "requirements-test.txt").read_text().splitlines()
    assert {"-r requirements.txt", "-r requirements-tracing.txt"} <= set(lines)
    assert any(line.startswith("opentelemetry-sdk") for line in
               requirement_lines(ROOT / "requirements-tracing.txt"))  # fmt: skip


@pytest.mark.parametrize("script", SCRIPTS)
def test_shell_scripts_parse(script: str) -> None:
    subprocess.run([require_tool("bash"), "-n", str(ROOT / script)], check=True)


@pytest.mark.parametrize("script", ["bin/test", "bin/run", "bin/venv", ".ci/run"])
def test_entry_scripts_are_executable(script: str) -> None:
    assert os.access(ROOT / script, os.X_OK)


# --- installs into fresh virtualenvs -----------------------------------------------------------


def checkout_copy(destination: Path) -> Path:
    """Copy the files git would check out (tracked, and new ones not ignored) to `destination`:
    an install from ROOT itself would leave build files in it."""
    listed = subprocess.run(
        [require_tool("git"), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
        timeout=RUN_TIMEOUT,
    ).stdout.split(b"\0")
    for name in filter(None, (entry.decode() for entry in listed)):
        source = ROOT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def run(command: list[str], cwd: Path, timeout: float = RUN_TIMEOUT) -> str:
    """Run `command` with none of this session's Python settings; return its stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    result = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"{command}: {result.stdout}\n{result.stderr}"
    return result.stdout


def site_packages(venv: Path) -> Path:
    [path] = (venv / "lib").glob("python3.*/site-packages")
    return path


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return checkout_copy(tmp_path_factory.mktemp("checkout"))


@pytest.mark.slow
def test_the_client_installs_alone_with_urllib3_and_click(checkout: Path, tmp_path: Path) -> None:
    venv = tmp_path / "client-venv"
    run([sys.executable, "-m", "venv", str(venv)], tmp_path)
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run([*pip, str(checkout)], tmp_path, INSTALL_TIMEOUT)

    site = site_packages(venv)
    [dist_info] = site.glob("taskforge-*.dist-info")
    assert (dist_info / "top_level.txt").read_text().split() == ["taskforge"]
    recorded = {line.split(",")[0] for line in (dist_info / "RECORD").read_text().splitlines()}
    # Inside site-packages the package and its metadata; outside it, the command only.
    inside = {Path(name).parts[0] for name in recorded if not name.startswith("..")}
    assert inside == {"taskforge", dist_info.name}, inside
    assert {name for name in recorded if name.startswith("..")} == {"../../../bin/taskforge"}
    metadata = email.message_from_string((dist_info / "METADATA").read_text())
    declared = [str(Requirement(line)) for line in metadata.get_all("Requires-Dist")]
    assert declared == [str(Requirement(line)) for line in client_dependencies()]
    # Nothing of the server landed, by pip or as a dependency.
    top_level = {p.name.split("-")[0].split(".")[0].lower() for p in site.iterdir()}
    assert not top_level & (SERVER_PACKAGES | {"flask", "gunicorn", "redis"}), top_level

    help_text = run([str(venv / "bin" / "taskforge"), "--help"], tmp_path)
    assert help_text.startswith("Usage: taskforge")
    probe = "import importlib.util as u; print([m for m in %r if u.find_spec(m)])"
    found = run([python, "-c", probe % sorted(SERVER_PACKAGES)], tmp_path)
    assert found.strip() == "[]"


@pytest.mark.slow
def test_the_server_venv_runs_workerd_and_a_handler_package_installed_into_it(
    checkout: Path, tmp_path: Path
) -> None:
    require_tool("bash")
    run([str(checkout / "bin" / "venv")], tmp_path, INSTALL_TIMEOUT)
    venv = checkout / ".venv"
    python = str(venv / "bin" / "python")
    site = site_packages(venv)
    # The server is on the path through the checkout, not copied into site-packages.
    assert not {p.name for p in site.iterdir()} & SERVER_PACKAGES
    assert (site / "taskforge-checkout.pth").read_text().split() == [str(checkout)]

    handlers = tmp_path / "myhandlers"
    (handlers / "myhandlers").mkdir(parents=True)
    (handlers / "pyproject.toml").write_text(
        '[project]\nname = "myhandlers"\nversion = "1"\n'
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
    )
    (handlers / "myhandlers" / "__init__.py").write_text(
        'from workerd import handler\n\n\n@handler("shout")\ndef shout(payload):\n'
        '    return payload["text"].upper()\n'
    )
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
    run([*pip, str(handlers)], tmp_path, INSTALL_TIMEOUT)

    elsewhere = tmp_path / "elsewhere"  # neither the checkout nor the handler's source
    elsewhere.mkdir()
    assert run([python, "-m", "workerd", "--help"], elsewhere).startswith(
        "usage: python -m workerd"
    )
    checked = run(
        ["env", "TASKFORGE_HANDLERS=myhandlers", python, "-m", "workerd", "--check-config"],
        elsewhere,
    )
    assert "register: shout" in checked, checked
    assert run([str(venv / "bin" / "taskforge"), "--help"], elsewhere).startswith("Usage:")
