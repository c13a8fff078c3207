"""The dashboard under real gunicorn: a login made by one gateway process is honoured by
another started later (the signing key lives in Redis), and it opens GET /events."""

from __future__ import annotations

import http.client
import re
from collections.abc import Callable
from typing import Any

from tests.gateway.conftest import TOKEN
from tests.support.gunicorn import Gunicorn

CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def get(gw: Gunicorn, path: str, cookie: str = "") -> tuple[int, dict[str, str], str]:
    """GET a page with a cookie header; return status, headers, body text."""
    status, headers, body = gw.request("GET", path, headers={"Cookie": cookie} if cookie else {})
    return status, headers, body.decode() if isinstance(body, bytes) else str(body)


def log_in(gw: Gunicorn) -> str:
    """Log in through the real form; return the session cookie (name=value)."""
    status, headers, page = get(gw, "/ui/login")
    assert status == 200
    cookie = headers["set-cookie"].split(";")[0]
    csrf = CSRF.search(page)
    assert csrf
    body = f"csrf={csrf.group(1)}&token={TOKEN}&next=/ui"
    status, headers, _ = gw.request(
        "POST",
        "/ui/login",
        body,
        {"Cookie": cookie, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert (status, headers["location"]) == (303, "/ui")
    return headers["set-cookie"].split(";")[0]


def test_a_login_outlives_the_process_that_made_it(
    start_gateway: Callable[..., Any], r: Any
) -> None:
    with start_gateway(TASKFORGE_API_TOKEN=TOKEN, WEB_CONCURRENCY="1") as first:
        cookie = log_in(first)
        assert get(first, "/ui", cookie)[0] == 200
    with start_gateway(TASKFORGE_API_TOKEN=TOKEN) as second:  # new processes, same Redis
        status, _, page = get(second, "/ui", cookie)
        assert status == 200 and 'data-page="overview"' in page
        assert get(second, "/ui")[0] == 302  # without the cookie: the login form

        conn = http.client.HTTPConnection(second.host, second.port, timeout=10)
        try:
            conn.request("GET", "/events", headers={"Cookie": cookie})
            response = conn.getresponse()
            assert response.status == 200
            assert response.getheader("Content-Type", "").startswith("text/event-stream")
        finally:
            conn.close()
        assert second.request("GET", "/events")[0] == 401
