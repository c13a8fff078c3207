"""The dashboard at /ui through the Flask test client, on the private redis-server.

Jobs are seeded through the engine (the same scripts a producer and a worker call); forms are
posted as a browser would, with the CSRF token read from the page they came from.
"""

from __future__ import annotations

import html
import json
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from gateway.app import gateway_client
from gateway.ui.job_pages import SHOWN_CHARS
from gateway.ui.security import CONTENT_SECURITY_POLICY
from shared.engine.engine_types import Code
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.job_ids import new_job_id
from shared.model.jobs import validate_enqueue
from shared.read.directory import QueueDirectory
from shared.settings.config import Settings
from tests.gateway.conftest import TOKEN, make_app
from tests.support.tools import free_port

K = Keys()
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
PAGES = ["/ui", "/ui/queues", "/ui/workers", "/ui/schedules", "/ui/jobs", "/ui/dlq"]


@pytest.fixture
def engine(r: redis.Redis) -> Scripts:
    """Return engine scripts on the private server (emptied by `r`)."""
    return Scripts(r, K)


@pytest.fixture
def ui(engine: Scripts) -> Iterator[FlaskClient]:
    """Return a test client of an open gateway (no token) on the private server."""
    with make_app(engine).test_client() as client:
        yield client


@pytest.fixture
def locked(engine: Scripts) -> Iterator[FlaskClient]:
    """Return a test client of a gateway that requires TOKEN."""
    with make_app(engine, TASKFORGE_API_TOKEN=TOKEN).test_client() as client:
        yield client


def put(engine: Scripts, queue: str = "default", **fields: Any) -> str:
    """Enqueue a job as a producer would: list the queue, then enqueue; return its id."""
    QueueDirectory(engine).ensure(queue)
    job_id = new_job_id(queue)
    request = validate_enqueue({"type": "seed", "queue": queue, **fields})
    assert engine.enqueue(request, job_id).created
    return job_id


def put_dead(engine: Scripts, queue: str = "default", **fields: Any) -> str:
    """Enqueue a job and fail its only execution: dead."""
    job_id = put(engine, queue, max_retries=1, priority=2**31, **fields)
    job = engine.claim("w-test", queue=queue)
    assert job is not None and job.id == job_id
    assert engine.fail(job_id, job.token, "ValueError: boom", queue=queue).code is Code.DEAD
    return job_id


def csrf_of(page: TestResponse) -> str:
    """Return the CSRF token a rendered page's forms carry."""
    match = CSRF.search(page.get_data(as_text=True))
    assert match, "the page has no form with a CSRF token"
    return match.group(1)


def post(client: FlaskClient, path: str, from_page: str, **form: Any) -> TestResponse:
    """Post a form as the page `from_page` would (with its CSRF token)."""
    token = csrf_of(client.get(from_page))
    return client.post(path, data={"csrf": token, **form})


def text(response: TestResponse) -> str:
    """Return a response's body as text."""
    return response.get_data(as_text=True)


# --- pages ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PAGES)
def test_every_page_renders_with_its_hook_and_headers(ui: FlaskClient, path: str) -> None:
    response = ui.get(path)
    assert response.status_code == 200
    assert response.content_type.startswith("text/html")
    page = path.removeprefix("/ui").strip("/") or "overview"
    assert f'data-page="{page}"' in text(response)
    assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "same-origin"


def test_overview_counts_each_queue_and_state(ui: FlaskClient, engine: Scripts) -> None:
    for _ in range(3):
        put(engine, "mail")
    put_dead(engine, "mail")
    put(engine, "pdf", scheduled_at="2999-01-01T00:00:00Z")

    body = text(ui.get("/ui"))

    def cell(queue: str, state: str) -> str:
        match = re.search(rf'data-queue="{queue}" data-state="{state}"><a [^>]*>(\d+)</a>', body)
        assert match, (queue, state)
        return match.group(1)

    assert cell("mail", "pending") == "3"
    assert cell("mail", "dead") == "1"
    assert cell("pdf", "scheduled") == "1"
    assert cell("pdf", "pending") == "0"
    assert 'id="oldest-pending"' in body and '<svg id="throughput"' in body


def test_the_overview_fragment_holds_the_live_part_alone(ui: FlaskClient, engine: Scripts) -> None:
    put(engine, "mail")
    response = ui.get("/ui/live/overview")
    body = text(response)
    assert response.status_code == 200
    assert body.lstrip().startswith('<div id="overview-live" data-live-part>')
    assert 'data-queue="mail" data-state="pending"' in body
    assert "<nav" not in body


def test_no_page_has_inline_script_or_style(ui: FlaskClient, engine: Scripts) -> None:
    dead = put_dead(engine)
    for path in [*PAGES, f"/ui/jobs/{dead}", "/ui/jobs?state=dead"]:
        body = text(ui.get(path))
        assert "style=" not in body, path
        assert "<style" not in body, path
        for script in re.findall(r"<script[^>]*>", body):
            assert 'src="/ui/static/' in script, (path, script)
        assert re.search(r"<script[^>]*>\s*[^<\s]", body) is None, path  # no inline code
        assert re.search(r"<[^>]*\son[a-z]+=", body) is None, path  # no handler attributes


def test_assets_are_served_from_the_package(ui: FlaskClient) -> None:
    css = ui.get("/ui/static/ui.css")
    js = ui.get("/ui/static/live.js")
    assert css.status_code == js.status_code == 200
    assert "new EventSource(" in text(js)
    assert "@media" in text(css)
    for path in ("/ui", "/ui/static/ui.css"):
        page = text(ui.get(path))
        assert "http://" not in page and "https://" not in page, path


def test_listing_filters_by_state_queue_and_type(ui: FlaskClient, engine: Scripts) -> None:
    mail = [put(engine, "mail", type="email") for _ in range(2)]
    other = put(engine, "mail", type="sms")
    elsewhere = put(engine, "pdf", type="email")
    dead = put_dead(engine, "mail", type="email")

    body = text(ui.get("/ui/jobs?state=pending&queue=mail&type=email"))

    assert all(f'data-job-id="{job_id}"' in body for job_id in mail)
    assert f'data-job-id="{other}"' not in body
    assert f'data-job-id="{elsewhere}"' not in body
    assert f'data-job-id="{dead}"' not in body
    assert f'href="/ui/jobs/{mail[0]}"' in body
    assert '<option value="pending" selected>' in body

    dead_page = text(ui.get("/ui/jobs?state=dead"))
    assert f'data-job-id="{dead}"' in dead_page and f'data-job-id="{other}"' not in dead_page


def test_listing_pages_by_cursor(ui: FlaskClient, engine: Scripts) -> None:
    ids = [put(engine, "bulk") for _ in range(55)]
    first = text(ui.get("/ui/jobs?queue=bulk"))
    link = re.search(r'id="next-page" href="([^"]+)"', first)
    assert link, "a full page links to the next"
    second = text(ui.get(link.group(1).replace("&amp;", "&")))
    shown = re.findall(r'data-job-id="([^"]+)"', first) + re.findall(
        r'data-job-id="([^"]+)"', second
    )
    assert sorted(shown) == sorted(ids)  # each once, none lost
    assert 'id="next-page"' not in second


@pytest.mark.parametrize(
    "query", ["state=nope", "queue=bad%20name", "type=%3Cx%3E", "cursor=not-a-cursor"]
)
def test_a_bad_filter_is_a_400_page(ui: FlaskClient, query: str) -> None:
    response = ui.get(f"/ui/jobs?{query}")
    assert response.status_code == 400
    assert 'id="error-message"' in text(response)
    assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY


def test_scheduled_and_retrying_are_in_the_nav(ui: FlaskClient) -> None:
    body = text(ui.get("/ui"))
    assert 'href="/ui/jobs?state=scheduled"' in body
    assert 'href="/ui/jobs?state=retrying"' in body


def test_job_page_shows_payload_history_and_traceback(ui: FlaskClient, engine: Scripts) -> None:
    job_id = put(engine, "mail", payload={"to": "a@example.com", "n": 1}, max_retries=1)
    job = engine.claim("host-1-42-w0-1", queue="mail")
    assert job is not None
    trace = "Traceback (most recent call last):\n  boom"
    engine.fail(job_id, job.token, "KeyError: to", traceback=trace, queue="mail")

    response = ui.get(f"/ui/jobs/{job_id}")
    body = text(response)

    assert response.status_code == 200
    assert '<strong id="job-status" class="status status-dead">dead</strong>' in body
    assert re.findall(r'<li data-event="(\w+)">', body) == ["enqueued", "claimed", "dead"]
    assert "&#34;to&#34;: &#34;a@example.com&#34;" in body  # indented JSON, escaped
    assert "{\n  &#34;to&#34;" in body
    assert "Traceback (most recent call last):" in body
    assert '<form id="replay"' in body and '<form id="cancel"' not in body


def test_the_job_page_names_the_worker_of_a_completed_job_as_of_a_dead_one(
    ui: FlaskClient, engine: Scripts
) -> None:
    done = put(engine, "mail")
    job = engine.claim("host-1-42-w0-1", queue="mail")
    assert job is not None and job.id == done
    assert engine.complete(done, job.token, queue="mail").code is Code.DONE
    dead = put_dead(engine, "mail")
    never_ran = put(engine, "mail")

    worker = '<td id="job-worker"><code>{}</code></td>'
    assert worker.format("host-1-42-w0-1") in text(ui.get(f"/ui/jobs/{done}"))
    assert worker.format("w-test") in text(ui.get(f"/ui/jobs/{dead}"))
    assert 'id="job-worker"' not in text(ui.get(f"/ui/jobs/{never_ran}"))


def test_a_big_payload_shows_its_start_and_links_the_whole(
    ui: FlaskClient, engine: Scripts
) -> None:
    big = {"blob": "x" * 200_000}
    job_id = put(engine, "mail", payload=big)
    body = text(ui.get(f"/ui/jobs/{job_id}"))
    shown = re.search(r'<pre id="job-payload" class="wrap">(.*?)</pre>', body, re.S)
    assert shown is not None and len(html.unescape(shown.group(1))) == SHOWN_CHARS
    assert f"The first 65,536 characters of {len(json.dumps(big, indent=2)):,};" in body
    link = f'<a href="/ui/jobs/{job_id}/payload.json">the whole payload as JSON</a>'
    assert link in body and 'id="job-result-cut"' not in body
    whole = ui.get(f"/ui/jobs/{job_id}/payload.json")
    assert (whole.status_code, whole.mimetype, whole.get_json()) == (200, "application/json", big)
    assert ui.get(f"/ui/jobs/{job_id}/result.json").status_code == 404  # no result yet


def test_a_small_payload_shows_whole_without_a_note(ui: FlaskClient, engine: Scripts) -> None:
    body = text(ui.get(f"/ui/jobs/{put(engine, 'mail', payload={'n': 1})}"))
    assert 'id="job-payload-cut"' not in body and "&#34;n&#34;: 1" in body


def test_times_carry_their_exact_moment_for_times_js(ui: FlaskClient, engine: Scripts) -> None:
    body = text(ui.get(f"/ui/jobs/{put(engine, 'mail')}"))
    # Without JavaScript the exact time is the text; times.js makes it relative, keeps the title.
    stamps = re.findall(r'<time datetime="([^"]+)" title="([^"]+)">([^<]+)</time>', body)
    assert stamps and all(a == b == c for a, b, c in stamps), stamps
    assert "Date.parse(" in text(ui.get("/ui/static/times.js"))
    assert '<script src="/ui/static/times.js" defer></script>' in body


def test_a_pending_job_offers_cancel_not_replay(ui: FlaskClient, engine: Scripts) -> None:
    body = text(ui.get(f"/ui/jobs/{put(engine)}"))
    assert '<form id="cancel"' in body and '<form id="replay"' not in body


def test_unknown_and_malformed_job_pages(ui: FlaskClient) -> None:
    assert ui.get(f"/ui/jobs/{uuid.uuid4()}").status_code == 404
    assert ui.get("/ui/jobs/nope").status_code == 400


def test_a_hostile_payload_and_type_show_as_text(ui: FlaskClient, engine: Scripts) -> None:
    job_id = put(engine, payload={"html": "<script>alert(1)</script>"})
    # The API refuses such a type; a hash written some other way may still hold one.
    engine.redis.hset(K.job(job_id), "type", "x<script>")
    for path in (f"/ui/jobs/{job_id}", "/ui/jobs?state=pending"):
        body = text(ui.get(path))
        assert "<script>alert" not in body and "x<script>" not in body, path
        assert "x&lt;script&gt;" in body, path
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text(ui.get(f"/ui/jobs/{job_id}"))


def test_the_job_fragment_holds_status_and_history(ui: FlaskClient, engine: Scripts) -> None:
    job_id = put(engine)
    body = text(ui.get(f"/ui/jobs/{job_id}/live"))
    assert body.lstrip().startswith('<div id="job-live" data-live-part>')
    assert 'id="job-status"' in body and '<li data-event="enqueued">' in body


def test_pages_name_their_event_stream_and_fragment(ui: FlaskClient, engine: Scripts) -> None:
    job_id = put(engine)
    assert 'data-events="/events" data-refresh="/ui/live/overview"' in text(ui.get("/ui"))
    job_page = text(ui.get(f"/ui/jobs/{job_id}"))
    assert f'data-events="/events?job={job_id}"' in job_page
    assert f'data-refresh="/ui/jobs/{job_id}/live"' in job_page
    listing = text(ui.get("/ui/jobs?queue=mail&type=email"))
    assert 'data-events="/events?queue=mail&amp;type=email"' in listing
    assert 'id="live-hint"' in listing


def test_queues_and_workers_are_live_on_their_own_events(ui: FlaskClient, engine: Scripts) -> None:
    put(engine, "mail")
    queues = text(ui.get("/ui/queues"))
    assert 'data-events="/events" data-refresh="/ui/live/queues"' in queues
    on = re.search(r'data-live-on="([^"]+)"', queues)
    assert on and {"queue_paused", "queue_resumed", "enqueued", "gap"} <= set(on.group(1).split())
    assert not any(name.startswith("worker_") for name in on.group(1).split())
    workers = text(ui.get("/ui/workers"))
    assert 'data-events="/events" data-refresh="/ui/live/workers"' in workers
    on = re.search(r'data-live-on="([^"]+)"', workers)
    assert on and {"worker_joined", "worker_left", "worker_quiet", "claimed"} <= set(
        on.group(1).split()
    )
    assert "queue_paused" not in on.group(1)


def test_the_queues_and_workers_fragments_hold_their_live_part(
    ui: FlaskClient, engine: Scripts
) -> None:
    put(engine, "mail")
    engine.pause_queue("mail")
    body = text(ui.get("/ui/live/queues"))
    assert body.lstrip().startswith('<div id="queues-live" data-live-part>')
    assert '<tr data-queue="mail">' in body and '<td class="state">paused</td>' in body
    assert 'form class="resume"' in body and "<nav" not in body
    body = text(ui.get("/ui/live/workers"))
    assert body.lstrip().startswith('<div id="workers-live" data-live-part>')
    assert 'id="no-hosts"' in body and "<nav" not in body


def test_only_pages_with_a_stream_show_the_live_indicator(ui: FlaskClient) -> None:
    for path in PAGES:
        assert 'class="live-state"' in text(ui.get(path)), path
    confirm = post(ui, "/ui/dlq/act", "/ui/dlq", op="replay-all")
    assert 'data-page="confirm"' in text(confirm)
    assert 'class="live-state"' not in text(confirm)


def test_the_login_page_shows_no_live_indicator(locked: FlaskClient) -> None:
    body = text(locked.get("/ui/login"))
    assert 'data-page="login"' in body and 'class="live-state"' not in body


def test_a_listing_cuts_a_long_error_and_keeps_it_whole_in_the_title(
    ui: FlaskClient, engine: Scripts
) -> None:
    job_id = put(engine, max_retries=1, priority=2**31)
    job = engine.claim("w-test", queue="default")
    assert job is not None and job.id == job_id
    error = "ConnectionError: " + "x" * 400 + " <end>"
    engine.fail(job_id, job.token, error)
    for path in ("/ui/jobs?state=dead", "/ui/dlq"):
        body = text(ui.get(path))
        cell = re.search(
            r'<td class="error-text" title="([^"]+)"><div class="clamp">([^<]+)<', body
        )
        assert cell, path
        assert cell.group(1) == error.replace("<", "&lt;").replace(">", "&gt;"), path
        assert cell.group(2).endswith("…") and len(cell.group(2)) == 200, path
        assert "<wbr>T" in body  # a time may break after its date
    assert error.replace("<", "&lt;").replace(">", "&gt;") in text(ui.get(f"/ui/jobs/{job_id}"))


def test_redis_down_is_an_html_503_page() -> None:
    settings = Settings.from_env({"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"})
    down = make_app(Scripts(gateway_client(settings), K)).test_client()
    for path in PAGES:
        response = down.get(path)
        assert response.status_code == 503, path
        assert response.headers["Retry-After"] == "1"
        assert "Redis is unavailable" in text(response)
        assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY


def test_the_chart_counts_completions_and_failures(ui: FlaskClient, engine: Scripts) -> None:
    for _ in range(2):
        job_id = put(engine, "mail", priority=2**31)
        job = engine.claim("w-1", queue="mail")
        assert job is not None and job.id == job_id
        engine.complete(job_id, job.token, "1", queue="mail")
    put_dead(engine, "pdf")
    body = text(ui.get("/ui"))
    assert "2 completed, 1 failed</title>" in body
    assert body.count('<rect class="completed"') == 1  # one minute's bar (both this minute)
    assert body.count('<rect class="failed"') == 1


def test_a_listing_lets_a_dotted_type_break_at_its_separators(
    ui: FlaskClient, engine: Scripts
) -> None:
    put(engine, "mail-eu", type="billing.invoices.make_pdf")
    body = text(ui.get("/ui/jobs?state=pending"))
    assert '<td class="name">billing.<wbr>invoices.<wbr>make_<wbr>pdf</td>' in body
    assert '<td class="name">mail-<wbr>eu</td>' in body


def test_the_queues_page_shows_limits_and_a_held_jobs_page_says_what_it_waits_for(
    ui: FlaskClient, engine: Scripts
) -> None:
    from shared.model.limit_rules import parse_limits

    doc = {"concurrency": 5, "types": {"seed": {"concurrency": 1, "rate": "10/1s"}}}
    engine.set_limits("default", parse_limits(doc).compact_json())
    put(engine)
    held = put(engine)
    assert engine.claim("w1") is not None
    assert engine.claim("w2") is None

    def words(path: str) -> str:  # the page's text, tags out, spaces collapsed
        return " ".join(re.sub(r"<[^>]+>", "", text(ui.get(path))).split())

    page = words("/ui/queues")
    assert "queue: 1 of 5 running" in page
    assert "seed: 1 of 1 running, 10/s; 1 held" in page
    job_page = words(f"/ui/jobs/{held}")
    assert "waiting for a seed slot (its concurrency limit in queue default)" in job_page
    assert "by its concurrency limit" in job_page
