"""docs/API.md's endpoint table against the generated OpenAPI document, both ways.

Checked rather than generated: the table's rows are prose a reader needs (what a 409 means
here, which field a 400 names), which no schema holds. The test keeps the facts in step:
every operation has a row and every row names an operation; every status a row names is one
the document lists; every status the document lists is in the row, but for those the page
states once for every route (GLOBAL).
"""

from __future__ import annotations

import re

from gateway.openapi import document
from tests.support.tools import ROOT

API_MD = ROOT / "docs" / "API.md"
# Statuses the page states once, above or below the table, for every route they apply to.
GLOBAL = {
    "401": "Authorization: Bearer",  # "Authentication": a route needs the token
    "429": "Too many failed authentications",
    "503": "Redis unreachable or hung: 503",  # "Errors": any route that reads Redis
    "413": "(413:",  # "Bodies": over 1 MiB
    "415": "is refused (415)",  # "Bodies": a Content-Encoding
}
STATUSES = {"200", "201", "202", "204", "400", "401", "404", "409", "413", "415", "429", "503"}
# A status: three digits alone, not part of 1,000, 2.5 or 500ms.
STATUS = re.compile(r"(?<![\d,.])([1-5]\d\d)(?![\w]|,\d)")
ROUTE = re.compile(r"`(GET|POST|PUT|DELETE|PATCH) (/[^`?\s]*)")


def shape(path: str) -> str:
    """Return a path with its parameters blanked: ``/jobs/<id>`` and ``/jobs/{job_id}`` agree."""
    return re.sub(r"\{[^}]*\}|<[^>]*>", "{}", path)


def documented() -> dict[tuple[str, str], set[str]]:
    doc = document(auth=True)
    return {
        (method.upper(), shape(path)): set(operation["responses"])
        for path, item in doc["paths"].items()
        for method, operation in item.items()
    }


def table() -> dict[tuple[str, str], set[str]]:
    rows: dict[tuple[str, str], set[str]] = {}
    for line in API_MD.read_text().splitlines():
        if not line.startswith("| `"):
            continue
        routes, _, answers = line.partition(" | ")
        statuses = set(STATUS.findall(answers)) & STATUSES
        for method, path in ROUTE.findall(routes):
            rows[(method, shape(path))] = statuses
    return rows


def test_every_operation_has_a_row_and_every_row_an_operation() -> None:
    assert set(table()) == set(documented())


def test_each_row_names_exactly_the_statuses_the_document_lists() -> None:
    rows = table()
    for route, statuses in documented().items():
        assert rows[route] <= statuses, (route, "named but not documented")
        assert statuses - set(GLOBAL) <= rows[route], (route, "documented but not named")


def test_the_statuses_left_out_of_the_rows_are_stated_for_every_route() -> None:
    text = API_MD.read_text()
    for status, statement in GLOBAL.items():
        assert statement in text, status
