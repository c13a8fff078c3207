"""The dashboard's security: login with the API token, the session cookie, CSRF, the open
banner, and what gateway/auth.py lets through (/ui, static files, GET /events with a session)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from itsdangerous import TimestampSigner
from werkzeug.test import TestResponse

from gateway.app import gateway_client
from gateway.ui.security import COOKIE_NAME, SECRET_BYTES, SESSION_LIFETIME
from shared.engine.scripts import Scripts
from shared.settings.config import Settings
from tests.gateway.conftest import TOKEN, make_app
from tests.gateway.test_ui import PAGES, K, csrf_of, engine, put, text, ui  # noqa: F401
from tests.support.tools import free_port

NOW_OPEN = "open to anyone who can reach this address"


@pytest.fixture
def locked_app(engine: Scripts) -> Flask:  # noqa: F811
    """Return a gateway app that requires TOKEN."""
    return make_app(engine, TASKFORGE_API_TOKEN=TOKEN)


@pytest.fixture
def locked(locked_app: Flask) -> Iterator[FlaskClient]:
    """Return a browser-like client (it keeps cookies) of the locked gateway."""
    with locked_app.test_client() as client:
        yield client


def log_in(client: FlaskClient, token: str = TOKEN, next_path: str = "/ui") -> TestResponse:
    """Fill in and send the login form as a browser would."""
    form = client.get(f"/ui/login?next={next_path}")
    return client.post("/ui/login", data={"csrf": csrf_of(form), "token": token, "next": next_path})


def session_cookie(client: FlaskClient) -> str:
    """Return the value of the dashboard's session cookie the client holds."""
    cookie = client.get_cookie(COOKIE_NAME)
    assert cookie is not None
    return cookie.value


# --- login ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [*PAGES, "/ui/jobs?state=dead&queue=mail", "/ui/live/overview"])
def test_every_page_sends_a_logged_out_browser_to_login(locked: FlaskClient, path: str) -> None:
    response = locked.get(path)
    assert response.status_code == 302
    assert response.location.startswith("/ui/login?next=")
    assert response.headers["Content-Security-Policy"]  # on redirects too


def test_login_page_and_assets_need_no_login(locked: FlaskClient) -> None:
    page = locked.get("/ui/login")
    assert page.status_code == 200
    assert '<form id="login"' in text(page) and 'id="login-submit"' in text(page)
    assert 'id="open-banner"' not in text(page)
    for asset in ("/ui/static/ui.css", "/ui/static/live.js"):
        served = locked.get(asset)
        assert served.status_code == 200
        assert "script-src 'self'" in served.headers["Content-Security-Policy"]


def test_a_wrong_token_shows_an_error_and_logs_nobody_in(locked: FlaskClient) -> None:
    response = log_in(locked, token=TOKEN + "x")
    assert response.status_code == 401
    assert 'id="login-error"' in text(response)
    assert locked.get("/ui").status_code == 302


def test_logins_are_logged_and_never_the_token(
    locked: FlaskClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="gateway.ui.access")
    log_in(locked, token="guess-" + TOKEN)
    log_in(locked)
    locked.post("/ui/logout", data={"csrf": csrf_of(locked.get("/ui"))})
    events = [r.getMessage() for r in caplog.records if r.name == "gateway.ui.access"]
    assert events == ["ui_login_failed", "ui_login", "ui_logout"]
    assert all(TOKEN not in repr(r.__dict__) for r in caplog.records)


def test_the_right_token_logs_in_and_logout_ends_it(locked: FlaskClient) -> None:
    response = log_in(locked, next_path="/ui/queues")
    assert (response.status_code, response.location) == (303, "/ui/queues")
    for path in PAGES:
        page = locked.get(path)
        assert page.status_code == 200, path
        assert '<form id="logout"' in text(page) and 'id="open-banner"' not in text(page)

    assert locked.get("/ui/login").location == "/ui"  # logged in: no form again
    out = locked.post("/ui/logout", data={"csrf": csrf_of(locked.get("/ui"))})

    assert (out.status_code, out.location) == (303, "/ui/login")
    assert locked.get("/ui").status_code == 302


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example/", "/stats"])
def test_login_never_sends_the_browser_off_the_dashboard(locked: FlaskClient, target: str) -> None:
    assert log_in(locked, next_path=target).location == "/ui"


@pytest.mark.parametrize("target", ["/ui\r\nX-Evil: 1", "/ui/queues\t", "/ui\x7f"])
def test_a_next_with_control_characters_goes_to_the_overview(
    locked: FlaskClient, target: str
) -> None:
    assert log_in(locked, next_path=target).location == "/ui"
    # Logged in already: the form sends the browser on at once, to the same safe place.
    again = locked.get("/ui/login", query_string={"next": target})
    assert (again.status_code, again.location) == (302, "/ui")


def test_the_cookie_is_httponly_samesite_strict_and_secure_over_https(
    locked_app: Flask,
) -> None:
    with locked_app.test_client() as plain:
        cookie = log_in(plain).headers["Set-Cookie"]
    assert cookie.startswith(f"{COOKIE_NAME}=")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Secure" not in cookie

    with locked_app.test_client() as tls:
        form = tls.get("/ui/login", base_url="https://localhost")
        response = tls.post(
            "/ui/login",
            data={"csrf": csrf_of(form), "token": TOKEN},
            base_url="https://localhost",
        )
    assert "; Secure" in response.headers["Set-Cookie"]


def test_the_session_holds_no_token_and_its_key_is_in_redis(
    locked: FlaskClient, locked_app: Flask, r: redis.Redis
) -> None:
    log_in(locked)
    secret = r.get(K.ui_secret)
    assert secret is not None and len(secret) == SECRET_BYTES
    with locked_app.app_context():
        serializer = locked_app.session_interface.get_signing_serializer(locked_app)
        stored = serializer.loads(session_cookie(locked))
    assert set(stored) == {"auth", "csrf", "sid"}
    assert TOKEN not in str(stored)


def test_every_process_accepts_a_session_another_signed(
    locked: FlaskClient,
    engine: Scripts,  # noqa: F811
) -> None:
    log_in(locked)
    other = make_app(engine, TASKFORGE_API_TOKEN=TOKEN).test_client()  # another gunicorn worker
    other.set_cookie(COOKIE_NAME, session_cookie(locked))
    assert other.get("/ui").status_code == 200


def test_changing_the_token_logs_everyone_out(locked: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    log_in(locked)
    changed = make_app(engine, TASKFORGE_API_TOKEN="another-token").test_client()
    changed.set_cookie(COOKIE_NAME, session_cookie(locked))
    assert changed.get("/ui").status_code == 302


def test_a_login_older_than_the_session_lifetime_is_logged_out(
    locked: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    stale = time.time() - SESSION_LIFETIME.total_seconds() - 60
    with monkeypatch.context() as signed_then:
        signed_then.setattr(TimestampSigner, "get_timestamp", lambda self: int(stale))
        log_in(locked)
    assert locked.get("/ui").status_code == 302
    log_in(locked)  # signed now
    assert locked.get("/ui").status_code == 200


def test_a_tampered_cookie_is_logged_out(locked: FlaskClient) -> None:
    log_in(locked)
    value = session_cookie(locked)
    locked.set_cookie(COOKIE_NAME, value[:-2] + ("AA" if not value.endswith("AA") else "BB"))
    assert locked.get("/ui").status_code == 302


# --- CSRF ----------------------------------------------------------------------------------


@pytest.mark.parametrize("given", [None, "", "wrong"])
def test_a_post_without_the_csrf_token_is_400_and_changes_nothing(
    ui: FlaskClient,  # noqa: F811
    engine: Scripts,  # noqa: F811
    given: str | None,
) -> None:
    put(engine, "mail")
    ui.get("/ui/queues")  # the session has a CSRF token: the form's is what is missing
    data = {} if given is None else {"csrf": given}
    response = ui.post("/ui/queues/mail/pause", data=data)
    assert response.status_code == 400
    assert "CSRF" in text(response)
    assert response.headers["Content-Security-Policy"]
    assert not engine.redis.exists(K.for_queue("mail").paused)


def test_a_csrf_token_from_another_session_is_refused(ui: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    put(engine, "mail")
    stranger = make_app(engine).test_client()
    foreign = csrf_of(stranger.get("/ui/queues"))
    ui.get("/ui/queues")
    assert ui.post("/ui/queues/mail/pause", data={"csrf": foreign}).status_code == 400


def test_the_login_form_needs_its_csrf_token_too(locked: FlaskClient) -> None:
    locked.get("/ui/login")
    response = locked.post("/ui/login", data={"token": TOKEN})
    assert response.status_code == 400
    assert locked.get("/ui").status_code == 302


def test_logout_needs_its_csrf_token(locked: FlaskClient) -> None:
    log_in(locked)
    assert locked.post("/ui/logout").status_code == 400
    assert locked.get("/ui").status_code == 200


# --- the banner ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", PAGES)
def test_without_a_token_every_page_says_it_is_open(ui: FlaskClient, path: str) -> None:  # noqa: F811
    body = text(ui.get(path))
    assert 'id="open-banner"' in body and NOW_OPEN in body
    assert "TASKFORGE_API_TOKEN" in body
    assert '<form id="logout"' not in body


def test_without_a_token_login_goes_straight_to_the_dashboard(ui: FlaskClient) -> None:  # noqa: F811
    assert ui.get("/ui/login").location == "/ui"


# --- gateway/auth.py -----------------------------------------------------------------------


def test_the_api_stays_bearer_only_with_a_session(locked: FlaskClient) -> None:
    log_in(locked)
    assert locked.get("/stats").status_code == 401
    assert locked.post("/enqueue", data='{"type": "a"}').status_code == 401
    assert locked.post("/events").status_code == 401
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    assert locked.get("/stats", headers=bearer).status_code == 200


def test_events_take_a_logged_in_session_instead_of_the_header(locked: FlaskClient) -> None:
    assert locked.get("/events").status_code == 401  # no cookie, no header
    log_in(locked)
    response = locked.get("/events")
    try:
        assert response.status_code == 200
        assert response.mimetype == "text/event-stream"
    finally:
        response.close()  # ends the stream's generator
    wrong = {"Authorization": f"Bearer {TOKEN}x"}
    assert locked.get("/events", headers=wrong).status_code == 401  # a bad header stays bad


def test_events_refuse_a_logged_out_session(locked: FlaskClient) -> None:
    locked.get("/ui/login")  # a session cookie, with a CSRF token but no login
    assert locked.get_cookie(COOKIE_NAME) is not None
    assert locked.get("/events").status_code == 401


def test_ui_paths_that_are_no_page_stay_closed(locked: FlaskClient) -> None:
    assert locked.get("/ui/nowhere").status_code == 401
    assert re.search("Bearer", locked.get("/ui/nowhere").headers["WWW-Authenticate"])


def test_redis_down_with_a_token_is_a_503_page_not_a_failed_cookie() -> None:
    settings = Settings.from_env({"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"})
    scripts = Scripts(gateway_client(settings), K)
    down = make_app(scripts, TASKFORGE_API_TOKEN=TOKEN).test_client()
    for path in ("/ui/login", "/ui"):
        response = down.get(path)
        assert response.status_code == 503, path
        assert "Redis is unavailable" in text(response)
        assert "Set-Cookie" not in response.headers
    assert down.get("/ui/static/ui.css").status_code == 200  # files need no Redis
