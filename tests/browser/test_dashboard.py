"""The dashboard at /ui in a real headless Chromium, against a whole running TaskForge.

Each test seeds its own jobs through the API, in queues of its own where counts matter, and
uses the hooks docs/DASHBOARD.md promises (``data-page``, ``data-queue``/``data-state`` cells,
``#job-status``…). After each, conftest's `_clean_pages` fails it if a page requested another
origin or the console shows a Content-Security-Policy violation.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.select import Select

from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import EnqueueRequest
from shared.model.schedules import parse_entry
from tests.browser.conftest import (
    DLQ_QUEUE,
    JOB_WAIT,
    PHONE,
    TOKEN,
    WINDOW,
    WORK_QUEUE,
    Browser,
    System,
    origin,
    page_problems,
)
from workerd.periodic import Periodic

# Every page of the nav, by the path that opens it and the data-page it declares.
PAGES = {
    "overview": "/ui",
    "queues": "/ui/queues",
    "workers": "/ui/workers",
    "schedules": "/ui/schedules",
    "jobs": "/ui/jobs",
    "dlq": "/ui/dlq",
}


def text_is(browser: Browser, css: str, expected: str) -> bool:
    """Tell whether the element `css` selects exists and shows exactly `expected`."""
    found = browser.texts(css)
    return bool(found) and found[0] == expected


def row_ids(browser: Browser) -> set[str]:
    """Return the job ids of the rows of a jobs or DLQ table."""
    return set(browser.attributes("tr[data-job-id]", "data-job-id"))


def filter_jobs(browser: Browser, state: str, job_type: str = "", queue: str = "") -> None:
    """Fill the jobs page's filter form and submit it."""
    form = browser.find("form#job-filters")
    Select(form.find_element("css selector", "select[name=state]")).select_by_value(state)
    for name, value in (("type", job_type), ("queue", queue)):
        field = form.find_element("css selector", f"input[name={name}]")
        field.clear()
        field.send_keys(value)
    browser.submit(form.find_element("css selector", "button[type=submit]"), "jobs")


@contextlib.contextmanager
def paused(system: System, queue: str) -> Iterator[None]:
    """Pause `queue` through the API for the block; resume it after, whatever happens."""
    status, _, doc = system.open_gateway.request("POST", f"/queues/{queue}/pause")
    assert status == 200, (status, doc)
    try:
        yield
    finally:
        system.open_gateway.request("POST", f"/queues/{queue}/resume")


def test_overview_shows_counts_chart_and_banner(browser: Browser, system: System) -> None:
    """The overview counts the seeded jobs per queue and state, as GET /queues does."""
    idle = [system.enqueue("browser_ok", queue="ov-idle") for _ in range(3)]
    done = system.enqueue("browser_ok", queue=WORK_QUEUE)
    dead, _ = system.gated_dead_job()
    system.wait_status(done, "completed")

    url = f"{system.open_gateway.url}/ui"
    # The console check after each test means something only under a policy that forbids.
    _, headers, _ = system.open_gateway.request("GET", "/ui")
    policy = headers.get("content-security-policy", "")
    assert "default-src 'self'" in policy and "script-src 'self'" in policy, policy
    browser.open(url, "overview")
    browser.shot("overview")

    assert text_is(browser, 'td[data-queue="ov-idle"][data-state="pending"]', str(len(idle)))
    assert browser.displayed("#open-banner")
    assert browser.displayed("svg#throughput")
    assert browser.text("#oldest-pending")  # three jobs have waited a while
    # Every count the page shows is the one the API reports (workerd is idle now).
    for queue in system.queues():
        for state, count in queue["jobs"].items():
            css = f'td[data-queue="{queue["name"]}"][data-state="{state}"]'
            cells = browser.texts(css)
            if count or cells:  # a page may leave a zero out
                assert cells, f"no cell {css}"
                assert cells[0] == str(count), (css, cells[0])
    assert system.job(dead)["status"] == "dead"
    # The origin check after the test is not vacuous: it saw the page itself load.
    browser.drain_requests()
    assert url in {request for request, _ in browser.requests}


def test_every_page_opens_with_the_open_banner(browser: Browser, system: System) -> None:
    """Without a token every page says the UI is open; the workers page lists workerd."""
    hosts = system.workers()
    for page, path in PAGES.items():
        browser.open(system.open_gateway.url + path, page)
        browser.shot(page)
        assert browser.displayed("#open-banner"), page
    browser.open(system.open_gateway.url + PAGES["workers"], "workers")
    for host in hosts:
        assert browser.find_all(f'tr[data-host="{host["name"]}"]'), host["name"]


def test_job_filters_show_only_matching_rows(browser: Browser, system: System) -> None:
    """State, type and queue filters narrow the listing to exactly the matching jobs."""
    tag = uuid.uuid4().hex[:8]
    alpha = {system.enqueue(f"alpha-{tag}", queue="flt") for _ in range(2)}
    beta = {system.enqueue(f"beta-{tag}", queue="flt") for _ in range(2)}
    other_queue = system.enqueue(f"beta-{tag}", queue="flt-other")

    browser.open(f"{system.open_gateway.url}/ui/jobs", "jobs")
    filter_jobs(browser, "pending", job_type=f"alpha-{tag}")
    browser.shot("pending-alpha")
    assert row_ids(browser) == alpha

    filter_jobs(browser, "pending", job_type=f"beta-{tag}")
    assert row_ids(browser) == beta | {other_queue}

    filter_jobs(browser, "pending", job_type=f"beta-{tag}", queue="flt")
    browser.shot("pending-beta-flt")
    assert row_ids(browser) == beta

    filter_jobs(browser, "completed", job_type=f"alpha-{tag}")
    assert row_ids(browser) == set()


def test_job_page_shows_payload_result_and_history(browser: Browser, system: System) -> None:
    """From the listing to a job's page: payload (as text), result and its history."""
    job_id = system.enqueue("browser_ok", {"note": "<b>not bold</b>"}, queue=WORK_QUEUE)
    system.wait_status(job_id, "completed")

    browser.open(f"{system.open_gateway.url}/ui/jobs", "jobs")
    filter_jobs(browser, "completed", job_type="browser_ok", queue=WORK_QUEUE)
    link = browser.find(f'tr[data-job-id="{job_id}"] a')
    browser.submit(link, "job")
    browser.shot("job")

    assert browser.text("#job-status") == "completed"
    payload = browser.find("#job-payload")
    assert "<b>not bold</b>" in payload.text  # shown as text, not markup
    assert not payload.find_elements("css selector", "b")
    assert '"ok"' in browser.text("#job-result") or "ok" in browser.text("#job-result")
    events = browser.attributes("ol#job-history > li", "data-event")
    status, _, doc = system.open_gateway.request("GET", f"/jobs/{job_id}/history")
    assert status == 200
    assert events == [entry["event"] for entry in doc["history"]]
    assert events[0] == "enqueued" and events[-1] == "completed", events


def test_the_search_box_finds_a_job_by_id(browser: Browser, system: System) -> None:
    """An id typed in the top bar's search opens its job; an unknown one says so (404)."""
    job_id = system.enqueue("browser_ok", {}, queue=WORK_QUEUE)
    browser.open(f"{system.open_gateway.url}/ui/queues", "queues")
    browser.find("form.find input[name=id]").send_keys(f" {job_id.upper()} ")
    browser.submit("form.find button[type=submit]", "job")
    assert urlsplit(browser.driver.current_url).path == f"/ui/jobs/{job_id}"

    browser.find("form.find input[name=id]").send_keys("<b>nope</b>")
    browser.submit("form.find button[type=submit]", "error")
    assert browser.text("#error-message") == "No job with id “<b>nope</b>”."
    assert not browser.find_all("#error-message b")  # shown as text, not markup


def test_replay_dead_job_completes_live_without_reload(browser: Browser, system: System) -> None:
    """Replay a dead job from its page through the confirmation; the status turns completed
    by the live events, in the same document (no reload)."""
    job_id, marker = system.gated_dead_job()
    job_url = f"{system.open_gateway.url}/ui/jobs/{job_id}"
    browser.open(job_url, "job")
    assert browser.text("#job-status") == "dead"
    browser.shot("dead")

    marker.unlink()  # from now on the job's handler succeeds
    # Paused, the replayed job waits until the page is listening: the change must arrive live.
    with paused(system, WORK_QUEUE):
        browser.submit("form#replay button", "confirm")
        browser.shot("confirm")
        browser.submit("form#confirm button#confirm-yes", "job")
        if urlsplit(browser.driver.current_url).path != urlsplit(job_url).path:
            browser.open(job_url, "job")
        assert browser.text("#job-status") == "pending"
        assert system.job(job_id)["status"] == "pending"
        marker_value = uuid.uuid4().hex
        browser.driver.execute_script("window.__noReload = arguments[0];", marker_value)
        browser.wait(
            ec.presence_of_element_located(("css selector", 'body[data-live="connected"]')),
            "the page's event stream to connect",
        )
        browser.shot("pending")
    browser.wait(
        lambda _: text_is(browser, "#job-status", "completed"),
        "#job-status to become completed live",
        timeout=JOB_WAIT,
    )
    browser.shot("completed")
    assert browser.driver.execute_script("return window.__noReload;") == marker_value
    assert system.job(job_id)["status"] == "completed"
    events = browser.attributes("ol#job-history > li", "data-event")
    assert events.count("replayed") == 1 and events[-1] == "completed", events
    # times.js made the swapped-in history's times relative; the exact time is their title.
    browser.wait(
        lambda _: all_relative(browser.texts("#job-history time")),
        "the history's times to read relative after the live refresh",
    )
    for title, exact in zip(
        browser.attributes("#job-history time", "title"),
        browser.attributes("#job-history time", "datetime"),
        strict=True,
    ):
        assert title == exact and re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", exact), exact


def all_relative(times: list[str]) -> bool:
    """Say whether there are times and each reads as times.js writes it ("3 s ago")."""
    # "in 0 s": a moment the browser's clock has not quite reached (Redis's clock stamps it).
    return bool(times) and all(re.fullmatch(r"\d+ (s|min|h|d) ago|in \d+ s", t) for t in times)


def filter_dlq(browser: Browser, queue: str) -> None:
    """Fill the DLQ page's filter form with `queue` and submit it."""
    form = browser.find("form#dlq-filters")
    field = form.find_element("css selector", "input[name=queue]")
    field.clear()
    field.send_keys(queue)
    browser.submit(form.find_element("css selector", "button[type=submit]"), "dlq")


def confirm(browser: Browser, step: str, *shown: str) -> None:
    """On a confirmation page naming each of `shown`, say yes; wait for the next page."""
    browser.wait_page("confirm")
    browser.shot(step)
    source = browser.driver.page_source
    assert all(item in source for item in shown), shown
    assert browser.displayed("a#confirm-no")
    browser.click_away("form#confirm button#confirm-yes", "the confirmation to be left")


def test_dlq_replay_selected_then_purge_all_matching(browser: Browser, system: System) -> None:
    """The DLQ page replays the checked jobs, then purges all that match its queue filter,
    each after a confirmation page naming what it will do."""
    jobs = [system.gated_dead_job(DLQ_QUEUE) for _ in range(3)]
    for _, marker in jobs:
        marker.unlink()  # a replayed job now completes
    (first, _), (second, _), (third, _) = jobs

    browser.open(f"{system.open_gateway.url}/ui/dlq", "dlq")
    filter_dlq(browser, DLQ_QUEUE)
    browser.shot("filtered")
    assert row_ids(browser) == {first, second, third}
    for job_id in (first, second):
        browser.find(f'tr[data-job-id="{job_id}"] input[type=checkbox][name=id]').click()
    browser.click_away("button#replay-selected", "the DLQ page to be left")
    confirm(browser, "confirm-replay", first, second)
    system.wait_status(first, "completed")
    system.wait_status(second, "completed")
    assert system.job(third)["status"] == "dead"

    browser.open(f"{system.open_gateway.url}/ui/dlq", "dlq")
    filter_dlq(browser, DLQ_QUEUE)
    assert row_ids(browser) == {third}
    browser.click_away("button#purge-all", "the DLQ page to be left")
    confirm(browser, "confirm-purge-all", DLQ_QUEUE)
    browser.wait(lambda _: not system.exists(third), "the purge to delete the dead job")
    assert system.job(first)["status"] == "completed"  # not in the DLQ: purge leaves it


def test_pause_and_resume_a_queue_from_the_queues_page(browser: Browser, system: System) -> None:
    """The queues page's buttons pause and resume a queue; the API agrees each time."""
    system.enqueue("browser_ok", queue="pq")
    row = 'tr[data-queue="pq"]'
    browser.open(f"{system.open_gateway.url}/ui/queues", "queues")
    assert text_is(browser, f"{row} td.state", "active")

    browser.submit(f"{row} form.pause button", "queues")
    browser.shot("paused")
    assert text_is(browser, f"{row} td.state", "paused")
    assert system.queue("pq")["paused"] is True

    browser.submit(f"{row} form.resume button", "queues")
    browser.shot("resumed")
    assert text_is(browser, f"{row} td.state", "active")
    assert system.queue("pq")["paused"] is False


def mark_document(browser: Browser) -> str:
    """Put a random mark on the page's window and return it: a reload would drop it."""
    mark = uuid.uuid4().hex
    browser.driver.execute_script("window.__noReload = arguments[0];", mark)
    return mark


def wait_connected(browser: Browser) -> None:
    """Wait until the page's event stream is open."""
    browser.wait(
        ec.presence_of_element_located(("css selector", 'body[data-live="connected"]')),
        "the page's event stream to connect",
    )


def test_queues_page_shows_a_pause_through_the_api_live(browser: Browser, system: System) -> None:
    """A queue paused and resumed through the API (not the page) is shown so by the open
    queues page without a reload, as are the jobs enqueued meanwhile."""
    queue = f"live-{uuid.uuid4().hex[:8]}"
    system.enqueue("browser_ok", queue=queue)
    row = f'tr[data-queue="{queue}"]'
    browser.open(f"{system.open_gateway.url}/ui/queues", "queues")
    assert browser.find_all(".live-state"), "a live page shows its live indicator"
    wait_connected(browser)
    mark = mark_document(browser)
    assert text_is(browser, f"{row} td.state", "active")

    with paused(system, queue):
        browser.wait(lambda _: text_is(browser, f"{row} td.state", "paused"), f"{queue} paused")
        browser.shot("paused-by-api")
        assert browser.find_all(f"{row} form.resume button")
        system.enqueue("browser_ok", queue=queue)
        browser.wait(
            lambda _: text_is(browser, f'{row} td[data-state="pending"]', "2"),
            "the second pending job to be counted",
        )
    browser.wait(lambda _: text_is(browser, f"{row} td.state", "active"), f"{queue} resumed")
    assert browser.driver.execute_script("return window.__noReload;") == mark


def test_a_listing_hints_at_new_jobs_without_moving_its_rows(
    browser: Browser, system: System
) -> None:
    """A jobs listing does not rewrite its rows under the operator: a job event shows the
    "Jobs have changed — refresh" hint instead, in the same document."""
    queue = f"hint-{uuid.uuid4().hex[:8]}"
    first = system.enqueue("browser_ok", queue=queue)
    with paused(system, queue):  # the jobs stay pending: the rows stay what the page showed
        browser.open(f"{system.open_gateway.url}/ui/jobs?state=pending&queue={queue}", "jobs")
        wait_connected(browser)
        mark = mark_document(browser)
        assert not browser.displayed("#live-hint")
        system.enqueue("browser_ok", queue=queue)
        browser.wait(lambda _: browser.displayed("#live-hint"), "the refresh hint")
        browser.shot("hint")
        assert row_ids(browser) == {first}
        assert browser.driver.execute_script("return window.__noReload;") == mark


def test_workers_page_is_live(browser: Browser, system: System) -> None:
    """The workers page subscribes to host events and refreshes its hosts from a fragment;
    a quiet requested through the API shows without a reload."""
    [host] = system.workers()
    name = host["name"]
    browser.open(f"{system.open_gateway.url}/ui/workers", "workers")
    wait_connected(browser)
    assert browser.find_all(".live-state")
    mark = mark_document(browser)
    state = f'tr[data-host="{name}"] td.state'
    assert text_is(browser, state, "running")
    status, _, doc = system.open_gateway.request("POST", f"/workers/{name}/quiet")
    assert status in (200, 202), (status, doc)
    try:
        # workerd applies the request within a couple of seconds and says so (worker_quiet).
        browser.wait(lambda _: text_is(browser, state, "quiet"), f"{name} quiet", timeout=JOB_WAIT)
        browser.shot("quiet-by-api")
    finally:
        system.open_gateway.request("POST", f"/workers/{name}/resume")
    browser.wait(lambda _: text_is(browser, state, "running"), f"{name} running", timeout=JOB_WAIT)
    assert browser.driver.execute_script("return window.__noReload;") == mark


def test_pages_without_a_stream_show_no_live_indicator(browser: Browser, system: System) -> None:
    """The login and confirmation pages have no event stream, so they say nothing about it
    (a grey "live off" there read as a fault)."""
    browser.driver.get(f"{system.token_gateway.url}/ui")
    browser.wait_page("login")
    assert not browser.find_all(".live-state")
    job_id, _ = system.gated_dead_job()
    browser.open(f"{system.open_gateway.url}/ui/jobs/{job_id}", "job")
    assert browser.find_all(".live-state")
    browser.submit("form#replay button", "confirm")
    browser.shot("confirm")
    assert not browser.find_all(".live-state")
    assert browser.displayed("a#confirm-no")


def test_token_login_and_logout(browser: Browser, system: System) -> None:
    """With a token: /ui sends to the login page; a wrong token is refused, the right one
    logs in (no open banner), logout returns to the login page and /ui is closed again."""
    base = system.token_gateway.url
    browser.driver.get(f"{base}/ui")
    browser.wait_page("login")
    assert urlsplit(browser.driver.current_url).path == "/ui/login"
    assert not browser.find_all("#login-error")
    assert not browser.find_all("#open-banner")
    browser.shot("login")

    def log_in(token: str, page: str) -> None:
        field = browser.find("form#login input[name=token]")
        field.clear()
        field.send_keys(token)
        browser.submit("button#login-submit", page)

    log_in("not-the-token", "login")
    browser.shot("wrong-token")
    assert browser.displayed("#login-error")

    log_in(TOKEN, "overview")
    browser.shot("logged-in")
    assert not browser.find_all("#open-banner")
    browser.open(f"{base}/ui/jobs", "jobs")  # the session holds from page to page
    assert not browser.find_all("#open-banner")

    browser.submit("form#logout button", "login")
    browser.shot("logged-out")
    browser.driver.get(f"{base}/ui/queues")
    browser.wait_page("login")
    assert origin(browser.driver.current_url) == origin(base)


# A realistic load for the width checks: a long job type, an error that quotes a URL (long
# unbreakable words), a few queues with long names, one of them paused.
LONG_TYPE = "billing.invoices.generate_monthly_statement_pdf_for_enterprise_accounts"
LONG_ERROR = (
    "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='payments-api.internal."
    "example.com', port=443): Max retries exceeded with url: /v2/accounts/8f14e45f-ceea-467f-"
    "a8b6-4a2b1c9e0d3f/statements?month=2026-11&format=pdf&include=line_items,adjustments,"
    "credits (Caused by NewConnectionError('<urllib3.connection.HTTPSConnection object at "
    "0x7f3a2c1d9e80>: Failed to establish a new connection: [Errno 111] Connection refused'))"
)
WIDE_QUEUES = ("reports-monthly-enterprise", "notifications-email-transactional", "thumbnails")
# Every nav entry: the listings by state too, since each state has its own columns.
NAV_PAGES = {
    **{f"{page}:": (path, page) for page, path in PAGES.items()},
    "jobs:scheduled": ("/ui/jobs?state=scheduled", "jobs"),
    "jobs:retrying": ("/ui/jobs?state=retrying", "jobs"),
    "jobs:dead": ("/ui/jobs?state=dead", "jobs"),
    "jobs:processing": ("/ui/jobs?state=processing", "jobs"),
}


@pytest.fixture(scope="module")
def wide_data(system: System) -> Iterator[str]:
    """Seed the width checks' load once: long types and errors, in retrying and dead jobs
    (failed through the engine, as a worker would, in queues workerd does not serve), a
    scheduled job, and a paused queue (resumed after the module's width checks).

    Yield the dead job's id.
    """
    # An hour's backoff: the retrying job stays retrying while the checks run.
    engine = Scripts(system.redis, Keys(), Policy(retry_base_ms=3_600_000))
    retrying_queue, dead_queue, other = WIDE_QUEUES
    for queue, retries in ((retrying_queue, 5), (dead_queue, 1)):
        job_id = system.enqueue(LONG_TYPE, {"account": "x" * 200}, queue=queue, max_retries=retries)
        job = engine.claim("browser-wide-worker-with-a-long-name-0001", queue=queue)
        assert job is not None and job.id == job_id
        traceback = f'Traceback (most recent call last):\n  File "/srv/app/{"x/" * 60}tasks.py"\n'
        engine.fail(job_id, job.token, LONG_ERROR, traceback=traceback, queue=queue)
    system.enqueue(LONG_TYPE, queue=other, scheduled_at="2099-01-01T00:00:00Z")
    # A periodic schedule with long names and a zone with a long name (the Periodic page).
    schedule = {"cron": "30 2 * * 1-5", "timezone": "America/Argentina/Buenos_Aires"}
    schedule["job"] = {"type": LONG_TYPE, "queue": WIDE_QUEUES[0]}
    Periodic(engine, [parse_entry("reports-monthly-enterprise-digest", schedule)]).publish()
    # Its last tick (Tuesday 1 December 2026, 02:30 in Buenos Aires): a time in each column.
    engine.advance_schedule("reports-monthly-enterprise-digest", 1_796_103_000_000, None)
    system.enqueue(LONG_TYPE, queue=other)
    with paused(system, other):
        yield job_id  # the last one failed: dead


def page_widths(browser: Browser) -> tuple[int, int]:
    """Return the document's scroll width and the viewport's width, read at once."""
    return browser.driver.execute_script(
        "return [document.scrollingElement.scrollWidth, window.innerWidth];"
    )


def assert_fits(browser: Browser, page: str, size: tuple[int, int]) -> None:
    """At 1280x800 the page fits, tables included (no table scrolls in its box either); at
    390 px the page itself never scrolls sideways (wide tables scroll in their own box)."""
    browser.shot(f"{size[0]}-{page}")
    widths = page_widths(browser)
    assert widths[1] <= size[0] + 1, widths  # the viewport really is that wide
    assert widths[0] <= widths[1] + 1, f"{page} overflows: scrollWidth, innerWidth = {widths}"
    if size == WINDOW:
        # Wide enough for every column: no table scrolls inside its box either.
        boxes = browser.driver.execute_script(
            "return [...document.querySelectorAll('.scroll')]"
            ".filter(e => e.scrollWidth > e.clientWidth + 1)"
            ".map(e => [e.querySelector('table').id || e.querySelector('table').className,"
            " e.scrollWidth, e.clientWidth]);"
        )
        assert not boxes, f"{page}: tables wider than their box at 1280: {boxes}"


SIZES = pytest.mark.parametrize("size", [WINDOW, PHONE], ids=["1280x800", "phone"])


@SIZES
@pytest.mark.parametrize("page", list(NAV_PAGES))
def test_no_page_scrolls_sideways(
    browser: Browser, system: System, wide_data: str, page: str, size: tuple[int, int]
) -> None:
    """Every nav page fits 1280x800 and never scrolls sideways at phone width."""
    path, data_page = NAV_PAGES[page]
    browser.resize(size)
    browser.open(system.open_gateway.url + path, data_page)
    if page in ("jobs:", "jobs:scheduled", "jobs:retrying", "jobs:dead", "dlq:"):
        assert browser.find_all("tr[data-job-id]"), f"{page} lists no job: a vacuous check"
    assert_fits(browser, page, size)


def test_the_periodic_pages_times_name_their_zone_and_read_relative(
    browser: Browser, system: System, wide_data: str
) -> None:
    browser.resize(WINDOW)
    browser.open(system.open_gateway.url + "/ui/schedules", "schedules")
    browser.wait(
        lambda _: all(
            re.fullmatch(r"\d+ (s|min|h|d) ago|in \d+ (s|min|h|d)", t)
            for t in browser.texts("#schedules time.ago")
        ),
        "the schedule's times to read relative",
    )
    zoned = browser.texts("#schedules .zoned")
    assert len(zoned) == 6, zoned  # the last tick and the next 5 runs
    assert zoned[0] == "2026-12-01 02:30:00 America/Argentina/Buenos_Aires", zoned
    assert all(text.endswith(" 02:30:00 America/Argentina/Buenos_Aires") for text in zoned)
    # On hover, the same zoned time: times.js keeps the title the server gave.
    assert browser.attributes("#schedules time.ago", "title") == zoned
    assert browser.texts("#schedules time.ago")[0].endswith(" ago")


@SIZES
def test_a_job_page_and_its_confirmation_fit(
    browser: Browser, system: System, wide_data: str, size: tuple[int, int]
) -> None:
    """The dead job's page (long type, error and traceback) and the replay confirmation fit
    as the nav pages do."""
    browser.resize(size)
    browser.open(f"{system.open_gateway.url}/ui/jobs/{wide_data}", "job")
    assert LONG_ERROR in browser.text("main")  # all of it, not the listing's cut
    assert_fits(browser, "job", size)
    browser.submit("form#replay button", "confirm")
    assert_fits(browser, "confirm", size)


def test_the_page_checks_see_a_foreign_request_and_a_csp_violation(
    browser: Browser, system: System
) -> None:
    """The check every test ends with is not blind: a page that loads from another origin,
    and one that tries an inline style, are both reported."""
    browser.open(f"{system.open_gateway.url}/ui", "overview")
    browser.driver.execute_script(
        "const img = document.createElement('img');"
        "img.src = 'http://127.0.0.2:9/elsewhere.png';"
        "document.body.appendChild(img);"
        "document.body.setAttribute('style', 'color: red');"
    )

    def reported() -> list[str]:
        problems = page_problems(browser, system)
        image = [p for p in problems if "request beyond" in p and "elsewhere.png" in p]
        style = [p for p in problems if "CSP violation" in p and "style-src" in p]
        return problems if image and style else []

    browser.wait(lambda _: reported(), "the checks to report the image and the inline style")
    browser.forget_logs()  # seen and expected: the check after the test starts clean


def test_a_live_listing_resumes_after_its_stream_ended(browser: Browser, system: System) -> None:
    """After any stream end (here a worker restart: SIGHUP makes gunicorn replace its
    workers, which ends their streams) the page reconnects with its last id and gets what was
    written meanwhile. A listing does not re-read on reconnect, so the hint for a job enqueued
    while it was away can only come from the resumed stream."""
    queue = f"resume-{uuid.uuid4().hex[:8]}"
    first = system.enqueue("browser_ok", queue=queue)
    with paused(system, queue):
        browser.open(f"{system.open_gateway.url}/ui/jobs?state=pending&queue={queue}", "jobs")
        wait_connected(browser)
        mark = mark_document(browser)
        os.kill(system.open_gateway.process.pid, signal.SIGHUP)
        browser.wait(
            lambda _: browser.find("body").get_attribute("data-live") != "connected",
            "the stream to end with its worker",
        )
        # While away (EventSource waits 2 s), and through the engine: an HTTP request now may
        # reach a worker that is stopping, which resets it.
        engine = Scripts(system.redis, Keys())
        job = EnqueueRequest(type="browser_ok", payload_json="{}", queue=queue)
        assert engine.enqueue(job, str(uuid.uuid4())).created
        assert not browser.displayed("#live-hint")
        wait_connected(browser)
        browser.wait(lambda _: browser.displayed("#live-hint"), "the resumed hint")
        assert row_ids(browser) == {first}
        assert browser.driver.execute_script("return window.__noReload;") == mark
