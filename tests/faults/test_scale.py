"""The long scenarios' length: shorter in the suite, full in the report, never under a floor."""

from __future__ import annotations

import pytest

from tests.faults.report import run_env
from tests.faults.scale import SCALE_ENV, SUITE_SCALE, fault_scale, scaled


def test_the_suite_scale_applies_unless_one_is_set_and_a_floor_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(SCALE_ENV, raising=False)
    assert fault_scale() == SUITE_SCALE < 1
    assert scaled(60.0, floor=10.0) == 60.0 * SUITE_SCALE
    assert scaled(60.0, floor=50.0) == 50.0
    monkeypatch.setenv(SCALE_ENV, "1")
    assert scaled(60.0, floor=30.0) == 60.0
    monkeypatch.setenv(SCALE_ENV, " 0.1 ")
    assert scaled(60.0, floor=30.0) == 30.0


@pytest.mark.parametrize("raw", ["fast", "0", "-1", "11", "nan"])
def test_a_nonsense_scale_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv(SCALE_ENV, raw)
    with pytest.raises(ValueError, match=SCALE_ENV):
        fault_scale()


def test_the_report_runs_full_length_unless_the_caller_chose_a_scale() -> None:
    assert run_env({"PATH": "/bin"}) == {"PATH": "/bin", SCALE_ENV: "1.0"}
    assert run_env({SCALE_ENV: "0.5"})[SCALE_ENV] == "0.5"
