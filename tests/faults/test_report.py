"""The figures table of bench/FAULTS.md is built from the suite's own output."""

from __future__ import annotations

from tests.faults.report import collect, table


def test_figures_lines_become_one_row_each_with_the_rest_under_also() -> None:
    output = "\n".join(
        [
            "...",
            'FAULT-FIGURES chaos {"jobs": 900, "lost": 0, "recovery_s_p99": 0.8123, "kills": 41}',
            "noise FAULT-FIGURES not at the start",
            'FAULT-FIGURES aof_always {"lost": 0, "statuses": {"completed": 5}}',
            "2 passed in 70.00s",
        ]
    )
    rows = collect(output)
    assert [name for name, _ in rows] == ["chaos", "aof_always"]
    lines = table(rows).splitlines()
    assert len(lines) == 4
    chaos = lines[2].split(" | ")
    assert chaos[0] == "| chaos" and chaos[1] == "900" and chaos[3] == "0"
    assert "0.812" in lines[2] and lines[2].endswith("kills: 41 |")
    assert "statuses" not in lines[3]  # left out: the lost/duplicate columns already say it
