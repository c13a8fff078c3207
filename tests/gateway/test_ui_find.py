"""The dashboard's search box: a job id typed on any page goes to that job's page, anything
else to a 404 page naming it (escaped); a GET form, so no JavaScript and no CSRF token, but
behind the login like every page. Real redis-server through the Flask test client."""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from flask.testing import FlaskClient
from markupsafe import escape

from shared.engine.scripts import Scripts
from shared.model.job_ids import new_job_id
from tests.gateway.test_ui import PAGES, engine, locked, put, text, ui  # noqa: F401
from tests.gateway.test_ui_security import log_in

FORM = re.compile(r'<form class="find" role="search" method="get" action="([^"]+)">')


@pytest.mark.parametrize("path", PAGES)
def test_every_page_carries_the_search_form(ui: FlaskClient, path: str) -> None:  # noqa: F811
    page = text(ui.get(path))
    found = FORM.search(page)
    assert found and found.group(1) == "/ui/find", page[:2000]
    assert 'name="id"' in page


def test_a_known_id_goes_to_its_page(ui: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    job_id = put(engine, "mail")
    for typed in (job_id, f"  {job_id.upper()} "):
        response = ui.get("/ui/find", query_string={"id": typed})
        assert (response.status_code, response.location) == (303, f"/ui/jobs/{job_id}")
    page = ui.get("/ui/find", query_string={"id": job_id}, follow_redirects=True)
    assert page.status_code == 200 and job_id in text(page)


@pytest.mark.parametrize(
    "pasted",
    [
        "/jobs/{id}",
        "/ui/jobs/{id}",
        "https://tf.example.com:8080/ui/jobs/{id}?tab=history#top",
        '"id": "{id}",',
        '{{"id": "{id}", "queue": "mail", "status": "pending"}}',
        "job {id} is dead after 3 attempts",
    ],
)
def test_the_one_id_in_pasted_text_goes_to_its_page(
    ui: FlaskClient,  # noqa: F811
    engine: Scripts,  # noqa: F811
    pasted: str,
) -> None:
    job_id = put(engine, "mail")
    response = ui.get("/ui/find", query_string={"id": pasted.format(id=job_id.upper())})
    assert (response.status_code, response.location) == (303, f"/ui/jobs/{job_id}")


def test_text_holding_two_ids_or_an_id_inside_a_longer_one_names_no_job(
    ui: FlaskClient,  # noqa: F811
    engine: Scripts,  # noqa: F811
) -> None:
    first, second = put(engine, "mail"), put(engine, "mail")
    for typed in (f"{first} {second}", f"a{first}", f"{first}-0", f"{first}{first}"):
        assert ui.get("/ui/find", query_string={"id": typed}).status_code == 404, typed
    # The same id twice is still one id.
    twice = ui.get("/ui/find", query_string={"id": f"/ui/jobs/{first} ({first})"})
    assert (twice.status_code, twice.location) == (303, f"/ui/jobs/{first}")


@pytest.mark.parametrize(
    "typed",
    [
        "3f2b6c1e-8d4a-4f0b-9c2e-1a5d7e9b0c4f",  # well formed, never enqueued
        "mail",  # a fresh id of this queue: well formed, names the queue, still no job
        "nope",
        '<script>alert("x")</script>&amp;',
        "",
        "x" * 5000,
    ],
)
def test_anything_else_is_a_404_page_naming_it_escaped(ui: FlaskClient, typed: str) -> None:  # noqa: F811
    if typed == "mail":
        typed = new_job_id("mail")
    response = ui.get(f"/ui/find?id={quote(typed)}")
    body = text(response)
    assert response.status_code == 404
    assert response.content_type.startswith("text/html")
    assert 'data-page="error"' in body and "No job with id" in body
    shown = typed if len(typed) <= 100 else typed[:99] + "…"
    assert f"“{escape(shown)}”" in body  # as Jinja escapes
    assert "<script>alert" not in body


def test_the_search_is_behind_the_login(locked: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    job_id = put(engine)
    response = locked.get(f"/ui/find?id={job_id}")
    assert response.status_code == 302 and response.location.startswith("/ui/login?next=")
    log_in(locked)
    found = locked.get(f"/ui/find?id={job_id}")
    assert (found.status_code, found.location) == (303, f"/ui/jobs/{job_id}")
    assert locked.get("/ui/find?id=nope").status_code == 404
