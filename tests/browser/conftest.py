"""A whole running TaskForge and one headless Chromium, for the dashboard's browser tests.

`system` (one per module) is a private redis-server, the gateway under real gunicorn twice —
open at ``http://127.0.0.1:<port>`` and with TASKFORGE_API_TOKEN at ``http://localhost:<port>``
(another host name, so the browser keeps the two session cookies apart) — and a real workerd
serving WORK_QUEUE with the handlers of tests/browser/handlers_for_browser.py.

`browser` (one per module) is Debian's Chromium driven through its chromedriver by explicit
paths, with SE_OFFLINE set: Selenium Manager never looks for, let alone downloads, a driver or
a browser. Performance logging records every request the pages make; after each test the
`_clean_pages` fixture fails it if any request left the page's own origin or the console shows
a Content-Security-Policy violation. Screenshots go to TASKFORGE_SCREENSHOTS (default
``.screenshots/`` at the repository root), one file per test and step.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.chrome.webdriver import WebDriver
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.wait import WebDriverWait

from tests.support.gunicorn import Gunicorn, run_gunicorn
from tests.support.redis_server import RedisServer
from tests.support.tools import ROOT, free_port, require_tool, wait_until
from tests.support.workerd import Workerd, start_workerd, stop_all

TOKEN = "browser-test-token"
# The queues workerd serves; jobs put anywhere else stay pending. DLQ_QUEUE's dead jobs are
# the DLQ test's alone (it purges them all).
WORK_QUEUE = "work"
DLQ_QUEUE = "dlq-test"
HANDLERS = "workerd.demo,tests.browser.handlers_for_browser"
WINDOW = (1280, 800)
PHONE = (390, 844)
WAIT = 15.0  # seconds any one browser wait may take (a loaded 2-core machine)
JOB_WAIT = 20.0  # seconds for workerd to bring a job to a state
SHOTS_ENV = "TASKFORGE_SCREENSHOTS"


def origin(url: str) -> str:
    """Return scheme://host:port of `url` (the browser's notion of an origin)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@dataclass
class System:
    """The running parts: Redis, the open and the token gateway, workerd."""

    redis: redis.Redis
    open_gateway: Gunicorn
    token_gateway: Gunicorn
    workerd: Workerd
    tmp: Path

    def enqueue(self, job_type: str, payload: dict[str, Any] | None = None, **fields: Any) -> str:
        """Enqueue one job through POST /enqueue of the open gateway; return its id."""
        body: dict[str, Any] = {"type": job_type, "payload": payload or {}, **fields}
        status, _, doc = self.open_gateway.request(
            "POST", "/enqueue", body, headers={"Content-Type": "application/json"}
        )
        assert status == 201, (status, doc)
        return doc["id"]

    def job(self, job_id: str) -> dict[str, Any]:
        """Return GET /jobs/<id> of the open gateway."""
        status, _, doc = self.open_gateway.request("GET", f"/jobs/{job_id}")
        assert status == 200, (status, doc)
        return doc

    def exists(self, job_id: str) -> bool:
        """Tell whether GET /jobs/<id> finds the job (200) or not (404)."""
        status, _, doc = self.open_gateway.request("GET", f"/jobs/{job_id}")
        assert status in (200, 404), (status, doc)
        return status == 200

    def wait_status(self, job_id: str, status: str, timeout: float = JOB_WAIT) -> dict[str, Any]:
        """Wait until the job's status is `status`; return the job."""
        return wait_until(
            lambda: (job := self.job(job_id))["status"] == status and job,
            timeout,
            f"job {job_id} to be {status}",
            interval=0.05,
        )

    def queues(self) -> list[dict[str, Any]]:
        """Return GET /queues of the open gateway: one entry per queue."""
        status, _, doc = self.open_gateway.request("GET", "/queues")
        assert status == 200, (status, doc)
        return doc["queues"]

    def queue(self, name: str) -> dict[str, Any]:
        """Return the entry of GET /queues for queue `name`."""
        [entry] = [queue for queue in self.queues() if queue["name"] == name]
        return entry

    def workers(self) -> list[dict[str, Any]]:
        """Return the hosts of GET /workers of the open gateway."""
        status, _, doc = self.open_gateway.request("GET", "/workers")
        assert status == 200, (status, doc)
        return doc["hosts"]

    def gated_dead_job(self, queue: str = WORK_QUEUE) -> tuple[str, Path]:
        """Enqueue a ``browser_gated`` job with its marker file present; wait until it is dead.

        Return its id and the marker: remove the file and a replay of the job completes.
        """
        marker = self.tmp / f"gate-{uuid.uuid4().hex}"
        marker.touch()
        job_id = self.enqueue("browser_gated", {"marker": str(marker)}, queue=queue)
        self.wait_status(job_id, "dead")
        return job_id, marker


@pytest.fixture(scope="module")
def system(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    """Start Redis (emptied), both gateways and workerd for one module; stop them after."""
    redis_server.start()  # a crash test before us may have left it down
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()  # counts on the pages are this module's jobs alone
    tmp = tmp_path_factory.mktemp("browser")
    settings = {
        "REDIS_URL": redis_server.url,
        "PORT_WORKER": str(free_port()),
        "TASKFORGE_HANDLERS": HANDLERS,
        "WORKER_QUEUES": f"{WORK_QUEUE},{DLQ_QUEUE}",
        "WORKER_COUNT": "1",  # the machine is small; one worker runs these few jobs at once
        "WORKER_DRAIN_GRACE": "2s",
        "TASKFORGE_BIND_HOST": "127.0.0.1",
    }
    workerd = start_workerd(settings, tmp / "workerd.log", tmp / "workerd.err")
    try:
        with (
            run_gunicorn(
                redis_server.url, tmp_path_factory.mktemp("open"), TASKFORGE_BIND_HOST="127.0.0.1"
            ) as open_gateway,
            run_gunicorn(
                redis_server.url,
                tmp_path_factory.mktemp("token"),
                host="localhost",
                TASKFORGE_BIND_HOST="127.0.0.1",
                TASKFORGE_API_TOKEN=TOKEN,
            ) as token_gateway,
        ):
            yield System(client, open_gateway, token_gateway, workerd, tmp)
    finally:
        problems = stop_all([workerd])
        client.close()
        if problems:
            pytest.fail("; ".join(problems))


def screenshot_dir() -> Path:
    """Return (and create) where screenshots go: TASKFORGE_SCREENSHOTS or .screenshots/."""
    configured = os.environ.get(SHOTS_ENV, "").strip()
    directory = Path(configured) if configured else ROOT / ".screenshots"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@dataclass
class Browser:
    """One headless Chromium and what the tests ask of it."""

    driver: WebDriver
    shots: Path
    test_name: str = "setup"
    step: int = 0
    # Every request the pages made (Network.requestWillBeSent), drained from the log per test.
    requests: list[tuple[str, str]] = field(default_factory=list)
    # Every console entry, drained from the log per test.
    console: list[dict[str, Any]] = field(default_factory=list)

    # -- pages -------------------------------------------------------------------------------

    def open(self, url: str, page: str) -> None:
        """Load `url` and wait until it is the dashboard page `page` (body[data-page])."""
        self.driver.get(url)
        self.wait_page(page)

    def wait_page(self, page: str) -> WebElement:
        """Wait until the document's body says it is `page`; return the body."""
        return self.wait(
            ec.presence_of_element_located((By.CSS_SELECTOR, f'body[data-page="{page}"]')),
            f"the {page} page",
        )

    def submit(self, button: WebElement | str, page: str) -> None:
        """Click a button that navigates; wait for the old document to go and `page` to load."""
        self.click_away(button, "the page to be left")
        self.wait_page(page)

    def click_away(self, target: WebElement | str, what: str) -> None:
        """Click `target`, which navigates, and wait until the old document is gone.

        A CSS selector as `target` clicks the element the page holds at the click: a live page
        swaps its parts in once its stream opens (and on events), so an element found before
        that is stale; the one swapped in is the same button.

        A mark on the old document's window tells: a new document has none. (Selenium's
        staleness_of asks about the old element mid-navigation, which chromedriver sometimes
        answers with an "unknown error" instead of "stale", failing the wait at random; a script
        run while the document unloads may fail the same way, so such errors mean "not yet".)
        """
        self.driver.execute_script("window.__tfLeaving = true;")
        if isinstance(target, str):
            WebDriverWait(
                self.driver, WAIT, ignored_exceptions=(StaleElementReferenceException,)
            ).until(lambda _: self.find(target).click() or True, f"clicking {target}")
        else:
            target.click()
        WebDriverWait(self.driver, WAIT, ignored_exceptions=(WebDriverException,)).until(
            lambda driver: driver.execute_script("return window.__tfLeaving !== true;"),
            f"waiting for {what}",
        )

    def wait(self, condition: Any, what: str, timeout: float = WAIT) -> Any:
        """Wait for a Selenium condition, at most `timeout` seconds."""
        return WebDriverWait(self.driver, timeout).until(condition, f"waiting for {what}")

    def find(self, css: str) -> WebElement:
        """Return the one element `css` selects now."""
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str) -> list[WebElement]:
        """Return every element `css` selects now."""
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def text(self, css: str) -> str:
        """Return the visible text of the element `css` selects, stripped."""
        # Read in one script, not find-then-read: live.js may swap the element in between.
        found = self.driver.execute_script(
            "const e = document.querySelector(arguments[0]); return e && e.innerText;", css
        )
        assert found is not None, f"nothing matches {css}"
        return found.strip()

    def displayed(self, css: str) -> bool:
        """Tell whether the element `css` selects is shown (laid out, not hidden), read in one
        script (see text): live.js may swap it between a find and a question to it."""
        return self.driver.execute_script(
            "const e = document.querySelector(arguments[0]);"
            "return !!e && e.getClientRects().length > 0"
            " && getComputedStyle(e).visibility !== 'hidden';",
            css,
        )

    def texts(self, css: str) -> list[str]:
        """Return the stripped visible text of every element `css` selects, read at once."""
        return self.driver.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText.trim());",
            css,
        )

    def attributes(self, css: str, name: str) -> list[str | None]:
        """Return attribute `name` of every element `css` selects, read at once (see text)."""
        return self.driver.execute_script(
            "return [...document.querySelectorAll(arguments[0])]"
            ".map(e => e.getAttribute(arguments[1]));",
            css,
            name,
        )

    def resize(self, size: tuple[int, int]) -> None:
        """Resize the window (the viewport follows its width)."""
        self.driver.set_window_size(*size)

    def shot(self, step: str) -> Path:
        """Save a screenshot named after the test and this step; return its path."""
        self.step += 1
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{self.test_name}-{self.step:02d}-{step}")
        path = self.shots / f"{name}.png"
        assert self.driver.save_screenshot(str(path)), f"no screenshot saved at {path}"
        return path

    # -- what the browser saw ----------------------------------------------------------------

    def drain_requests(self) -> list[tuple[str, str]]:
        """Read the performance log; keep and return (url, document url) of each new request."""
        new = []
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message.get("method") == "Network.requestWillBeSent":
                params = message["params"]
                new.append((params["request"]["url"], params.get("documentURL", "")))
        self.requests.extend(new)
        return new

    def drain_console(self) -> list[dict[str, Any]]:
        """Read the console log; keep and return its new entries."""
        new = self.driver.get_log("browser")
        self.console.extend(new)
        return new

    def forget_logs(self) -> None:
        """Drain both logs and forget everything seen so far."""
        self.drain_requests()
        self.drain_console()
        self.requests.clear()
        self.console.clear()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    """Start one headless Chromium (1280x800) for the module; quit it after.

    Tests name it before `system`, so a machine without Chromium skips (CI: fails) at once.
    """
    chromium = require_tool("chromium")
    chromedriver = require_tool("chromedriver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",  # root (CI, containers) cannot use Chromium's sandbox
        "--disable-dev-shm-usage",  # a container's /dev/shm is often too small
        "--disable-gpu",
        f"--window-size={WINDOW[0]},{WINDOW[1]}",
        # Nothing of Chromium's own may reach out: no updates, sync, safe browsing, first run.
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-default-apps",
        "--disable-extensions",
        "--disable-sync",
        "--no-first-run",
        "--no-default-browser-check",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    log_dir = tmp_path_factory.mktemp("chromedriver")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SE_OFFLINE", "true")  # Selenium Manager: never download anything
        driver = webdriver.Chrome(
            service=Service(chromedriver, log_output=str(log_dir / "chromedriver.log")),
            options=options,
        )
    try:
        driver.set_page_load_timeout(WAIT)
        driver.set_script_timeout(WAIT)
        yield Browser(driver, screenshot_dir())
    finally:
        driver.quit()


def page_problems(browser: Browser, system: System) -> list[str]:
    """Drain the browser's logs; return every request that left the page's own gateway origin
    (data: URLs aside) and every Content-Security-Policy violation the console reported."""
    gateways = {origin(system.open_gateway.url), origin(system.token_gateway.url)}
    browser.drain_requests()
    browser.drain_console()
    problems = [
        f"request beyond the page's own gateway origin: {url} (from {document})"
        for url, document in browser.requests
        if not url.startswith("data:")
        and (origin(url) not in gateways or origin(url) != origin(document or url))
    ]
    # Chromium reports a blocked inline script or style, or a blocked load, as "security".
    problems += [
        f"CSP violation in the console: {entry['message']}"
        for entry in browser.console
        if entry.get("source") == "security" or "Content Security Policy" in entry["message"]
    ]
    return problems


@pytest.fixture(autouse=True)
def _clean_pages(request: pytest.FixtureRequest) -> Iterator[None]:
    """Name the test's screenshots; after it, fail if a page requested another origin or the
    console reported a Content-Security-Policy violation."""
    if "browser" not in request.fixturenames:
        yield
        return
    browser: Browser = request.getfixturevalue("browser")
    system: System = request.getfixturevalue("system")
    browser.forget_logs()  # what an earlier test left was its own to check
    browser.test_name, browser.step = request.node.name, 0
    browser.resize(WINDOW)
    yield
    problems = page_problems(browser, system)
    assert not problems, "; ".join(problems)
