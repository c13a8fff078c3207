"""One handler per job type: the demo's types stay out of the user's names, and a type two
functions register stops workerd at start with one line naming both.

The handler modules are real files in the test's temporary directory (a package ``myapp``
on PYTHONPATH), imported by a real ``python -m workerd``, as a user's own would be.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from shared.model.jobs import JobState
from tests.support.tools import ROOT
from tests.support.workerd import Workerd, scrubbed_environment
from tests.workerd.conftest import Engine

# The user's module registers generic names the demo once used, and nothing of the demo's.
OWN_NAMES = """\
from workerd import handler


@handler("flaky")
def flaky(payload, job):
    return {"handler": "myapp"}


@handler("sleep")
def sleep(payload, job):
    return {"handler": "myapp"}
"""
# The same module taking one of the demo's own types.
TAKES_DEMO_TYPE = """\
from workerd import handler


@handler("demo.flaky")
def my_flaky(payload, job):
    return {"handler": "myapp"}
"""
# One module registering one type twice (a copy-paste slip).
TWICE_IN_ONE = """\
from workerd import handler


@handler("report")
def daily_report(payload, job):
    return None


@handler("report")
def weekly_report(payload, job):
    return None
"""


def _package(root: Path, tasks: str) -> Path:
    """Write ``myapp/tasks.py`` under `root` holding `tasks`; return `root` (for PYTHONPATH)."""
    package = root / "myapp"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "tasks.py").write_text(textwrap.dedent(tasks))
    return root


def _check_config(path: Path, handlers: str) -> tuple[int, str, str]:
    """Run ``python -m workerd --check-config`` with `path` on PYTHONPATH."""
    result = subprocess.run(
        [sys.executable, "-m", "workerd", "--check-config"],
        cwd=ROOT,
        env=scrubbed_environment()
        | {"PYTHONPATH": f"{ROOT}:{path}", "TASKFORGE_HANDLERS": handlers},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return result.returncode, result.stdout, result.stderr


def test_the_users_generic_names_load_beside_the_demo(tmp_path: Path) -> None:
    path = _package(tmp_path, OWN_NAMES)

    code, out, err = _check_config(path, "myapp.tasks,workerd.demo")

    assert (code, err) == (0, "")
    [registered] = [line for line in out.splitlines() if "register:" in line]
    types = registered.split("register: ", 1)[1].split(", ")
    assert {"flaky", "sleep", "demo.flaky", "demo.sleep", "generate_pdf"} <= set(types)


@pytest.mark.parametrize(
    ("handlers", "first", "second"),
    [
        ("myapp.tasks,workerd.demo", "myapp.tasks.my_flaky", "workerd.demo.flaky"),
        ("workerd.demo,myapp.tasks", "workerd.demo.flaky", "myapp.tasks.my_flaky"),
    ],
    ids=["user_first", "demo_first"],
)
def test_a_type_two_modules_register_exits_2_naming_both(
    tmp_path: Path, handlers: str, first: str, second: str
) -> None:
    path = _package(tmp_path, TAKES_DEMO_TYPE)

    code, out, err = _check_config(path, handlers)

    assert (code, out) == (2, "")
    assert err == (
        f"workerd: TASKFORGE_HANDLERS={handlers}: job type 'demo.flaky' is registered twice: "
        f"by {first} and by {second}; give one of them another type\n"
    )


def test_a_type_one_module_registers_twice_exits_2_naming_both_functions(tmp_path: Path) -> None:
    path = _package(tmp_path, TWICE_IN_ONE)

    code, _, err = _check_config(path, "myapp.tasks")

    assert code == 2
    assert "job type 'report' is registered twice: by myapp.tasks.daily_report and by " in err
    assert "myapp.tasks.weekly_report" in err and len(err.splitlines()) == 1


def test_workerd_refuses_to_start_with_a_type_registered_twice(
    start_workerd: Callable[..., Workerd], tmp_path: Path
) -> None:
    path = _package(tmp_path / "mods", TAKES_DEMO_TYPE)

    workerd = start_workerd(
        wait_ready=False, TASKFORGE_HANDLERS="myapp.tasks,workerd.demo", PYTHONPATH=str(path)
    )

    assert workerd.wait_exit(timeout=15) == 2
    [line] = workerd.stderr().strip().splitlines()
    assert (
        "'demo.flaky' is registered twice: by myapp.tasks.my_flaky and by workerd.demo.flaky"
        in (line)
    )
    assert workerd.events("supervisor_started") == []


def test_the_users_flaky_and_the_demos_run_side_by_side(
    start_workerd: Callable[..., Workerd], engine: Engine, tmp_path: Path
) -> None:
    path = _package(tmp_path / "mods", OWN_NAMES)
    start_workerd(TASKFORGE_HANDLERS="myapp.tasks,workerd.demo", PYTHONPATH=str(path))

    mine = engine.enqueue("flaky")
    demos = engine.enqueue("demo.flaky", {"fail_times": 0})
    jobs = engine.wait_all([mine, demos], [JobState.COMPLETED, JobState.DEAD], timeout=15)

    assert {job.status for job in jobs.values()} == {JobState.COMPLETED}
    assert json.loads(jobs[mine].result_json or "null") == {"handler": "myapp"}
    assert json.loads(jobs[demos].result_json or "null") == {"succeeded_on_attempt": 1}
