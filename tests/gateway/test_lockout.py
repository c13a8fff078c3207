"""Guessing the token: the lockout after MAX_FAILURES, shared through Redis by
every gateway process, the trusted-proxy rule, server-side logout and Cache-Control.

Against the private redis-server: two app instances on it stand for two gateway processes.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from gateway import auth, lockout
from gateway.client_address import client_address, counted_as
from gateway.lockout import MAX_FAILURES, WINDOW_SECONDS
from gateway.ui.security import COOKIE_NAME, SESSION_LIFETIME, RedisKeyedSessions
from shared.engine.scripts import Scripts
from shared.settings.config import ConfigError, Settings, summary
from tests.gateway.conftest import TOKEN, make_app
from tests.gateway.test_ui import K, csrf_of, engine, text  # noqa: F401
from tests.gateway.test_ui_security import log_in, session_cookie

RIGHT = {"Authorization": f"Bearer {TOKEN}"}
WRONG = {"Authorization": f"Bearer {TOKEN}-guess"}
PEER = "127.0.0.1"  # the test client's REMOTE_ADDR


def app_of(engine: Scripts, **env: str) -> Flask:  # noqa: F811
    """Return one more gateway process's app on the same Redis, requiring TOKEN."""
    return make_app(engine, TASKFORGE_API_TOKEN=TOKEN, **env)


@pytest.fixture
def api(engine: Scripts) -> Iterator[FlaskClient]:  # noqa: F811
    with app_of(engine).test_client() as client:
        yield client


def guess(client: FlaskClient, times: int, headers: dict[str, str] | None = None) -> list[int]:
    """Send `times` wrong tokens; return their statuses."""
    sent = {**WRONG, **(headers or {})}
    return [client.get("/stats", headers=sent).status_code for _ in range(times)]


class NoRedis:
    """Stands in for a Lockout's client: any Redis command fails the test."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the lockout sent a Redis command ({name}) on a success")


def wait_until(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# --- the API's bearer check ----------------------------------------------------------------


def test_the_nth_wrong_token_locks_the_address_out_even_for_the_right_one(
    api: FlaskClient, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO")
    assert guess(api, MAX_FAILURES - 1) == [401] * (MAX_FAILURES - 1)
    locked = api.get("/stats", headers=WRONG)
    assert locked.status_code == 429
    retry_after = int(locked.headers["Retry-After"])
    assert 1 <= retry_after <= WINDOW_SECONDS
    assert locked.get_json()["retry_after"] == retry_after
    assert "too many failed authentications" in locked.get_json()["error"]
    # The right token does not get through while locked: guessing learns nothing.
    assert api.get("/stats", headers=RIGHT).status_code == 429
    assert api.post("/enqueue", json={"type": "a"}, headers=RIGHT).status_code == 429  # fast path
    assert api.get("/stats").status_code == 401  # no token: no guess, nothing to lock
    # The count expires with its window: never a key without an expiry.
    ttl = r.pttl(K.auth_failures(PEER))
    assert 0 < ttl <= WINDOW_SECONDS * 1000
    lockouts = [rec for rec in caplog.records if rec.getMessage() == "auth_lockout"]
    assert len(lockouts) == 1 and lockouts[0].client == PEER and lockouts[0].surface == "api"
    assert all(TOKEN not in repr(rec.__dict__) for rec in caplog.records)


def test_the_lockout_ends_with_its_window(
    api: FlaskClient, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    guess(api, MAX_FAILURES)
    assert api.get("/stats", headers=RIGHT).status_code == 429
    assert api.get("/stats", headers=RIGHT).status_code == 429  # known: refused without Redis
    # The window ends (its length is a minute): the counter expires in Redis, and the process's
    # own clock passes the end it remembered.
    r.pexpire(K.auth_failures(PEER), 1)
    wait_until(lambda: not r.exists(K.auth_failures(PEER)))
    later = time.monotonic() + WINDOW_SECONDS
    monkeypatch.setattr(lockout, "time", SimpleNamespace(monotonic=lambda: later))
    assert api.get("/stats", headers=RIGHT).status_code == 200
    assert guess(api, 1) == [401]  # a fresh count


def test_a_known_lockout_is_refused_without_redis(engine: Scripts) -> None:  # noqa: F811
    app = app_of(engine)
    client = app.test_client()
    guess(client, MAX_FAILURES)
    check = auth.token_check(app)
    assert check is not None
    check.lockout._redis = NoRedis()  # type: ignore[assignment]
    refused = client.get("/stats", headers=RIGHT)
    assert refused.status_code == 429 and 1 <= int(refused.headers["Retry-After"]) <= 60
    assert guess(client, 3) == [429] * 3


def test_a_success_sends_no_redis_command_for_the_lockout(
    engine: Scripts,  # noqa: F811
) -> None:
    app = app_of(engine)
    check = auth.token_check(app)
    assert check is not None
    check.lockout._redis = NoRedis()  # type: ignore[assignment]
    client = app.test_client()
    assert client.get("/stats", headers=RIGHT).status_code == 200
    assert client.post("/enqueue", json={"type": "a"}, headers=RIGHT).status_code == 201
    assert client.get("/stats").status_code == 401


def test_gateway_processes_share_the_count(engine: Scripts) -> None:  # noqa: F811
    first, second = app_of(engine).test_client(), app_of(engine).test_client()
    half = MAX_FAILURES // 2
    assert guess(first, half) == [401] * half
    assert guess(second, MAX_FAILURES - half - 1) == [401] * (MAX_FAILURES - half - 1)
    assert guess(second, 1) == [429]  # the Nth failure across both
    assert first.get("/stats", headers=RIGHT).status_code == 429  # it saw failures: it reads
    # A process that has seen no failure from the address lets its first right token through
    # unread (gateway/lockout.py: one unchecked guess per process); its first wrong one counts
    # and teaches it.
    third = app_of(engine).test_client()
    assert third.get("/stats", headers=RIGHT).status_code == 200
    assert guess(third, 1) == [429]
    assert third.get("/stats", headers=RIGHT).status_code == 429


# --- the dashboard's login form ------------------------------------------------------------


def test_the_login_form_locks_out_and_shares_the_count_with_the_api(
    engine: Scripts,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO")
    with app_of(engine).test_client() as browser:
        statuses = [log_in(browser, token="guess").status_code for _ in range(MAX_FAILURES - 1)]
        assert statuses == [401] * (MAX_FAILURES - 1)
        guess(app_of(engine).test_client(), 1)  # the Nth, through the API of another process
        page = log_in(browser)  # the right token
        assert page.status_code == 429
        assert 1 <= int(page.headers["Retry-After"]) <= WINDOW_SECONDS
        assert 'id="login-error"' in text(page) and "Too many failed logins" in text(page)
        assert browser.get("/ui").status_code == 302  # not logged in
    assert all(TOKEN not in repr(rec.__dict__) for rec in caplog.records)


def test_a_login_after_a_few_mistakes_works(engine: Scripts) -> None:  # noqa: F811
    with app_of(engine).test_client() as browser:
        for _ in range(3):
            assert log_in(browser, token="typo").status_code == 401
        assert log_in(browser).status_code == 303
        assert browser.get("/ui").status_code == 200


# --- whose address: the trusted-proxy rule -------------------------------------------------


def test_a_spoofed_x_forwarded_for_from_an_untrusted_peer_is_ignored(
    engine: Scripts,  # noqa: F811
) -> None:
    client = app_of(engine).test_client()  # no trusted proxies
    statuses = [
        client.get("/stats", headers={**WRONG, "X-Forwarded-For": f"203.0.113.{n}"}).status_code
        for n in range(MAX_FAILURES)
    ]
    assert statuses[-1] == 429  # every guess counted as the peer's
    # Proxies are trusted, but not this peer: its header is still ignored.
    trusting_another = app_of(engine, TASKFORGE_TRUSTED_PROXIES="10.0.0.0/8").test_client()
    assert guess(trusting_another, 1, headers={"X-Forwarded-For": "198.51.100.7"}) == [429]


def test_behind_a_trusted_proxy_one_attacker_does_not_lock_out_everyone(
    engine: Scripts,  # noqa: F811
    r: redis.Redis,
) -> None:
    proxy = app_of(engine, TASKFORGE_TRUSTED_PROXIES=f"{PEER},10.0.0.0/8").test_client()
    attacker = {**WRONG, "X-Forwarded-For": "198.51.100.66, 10.0.0.2"}
    statuses = [proxy.get("/stats", headers=attacker).status_code for _ in range(MAX_FAILURES)]
    assert statuses[-1] == 429
    assert r.exists(K.auth_failures("198.51.100.66")) and not r.exists(K.auth_failures(PEER))
    # Someone else behind the same proxy: not locked out.
    other = {**RIGHT, "X-Forwarded-For": "198.51.100.10"}
    assert proxy.get("/stats", headers=other).status_code == 200
    # The attacker cannot escape by writing another address in front: the proxy appended the
    # real one on the right.
    escaping = {**RIGHT, "X-Forwarded-For": "192.0.2.1, 198.51.100.66"}
    assert proxy.get("/stats", headers=escaping).status_code == 429


NETS = tuple(ipaddress.ip_network(n) for n in ("127.0.0.1", "10.0.0.0/8"))


@pytest.mark.parametrize(
    ("peer", "forwarded", "proxies", "expected"),
    [
        ("192.0.2.9", "1.2.3.4", NETS, "192.0.2.9"),  # untrusted peer: header ignored
        ("127.0.0.1", "1.2.3.4", (), "127.0.0.1"),  # nobody trusted: header ignored
        ("127.0.0.1", None, NETS, "127.0.0.1"),
        ("127.0.0.1", "1.2.3.4", NETS, "1.2.3.4"),
        ("127.0.0.1", "6.6.6.6, 1.2.3.4, 10.0.0.2", NETS, "1.2.3.4"),  # right-most untrusted
        ("127.0.0.1", "10.0.0.3, 10.0.0.2", NETS, "10.0.0.3"),  # all trusted: the left-most
        ("127.0.0.1", "6.6.6.6, garbage", NETS, "127.0.0.1"),  # a hop it cannot read
        ("127.0.0.1", "[2001:db8::1]:443", NETS, "2001:db8::1"),
        ("127.0.0.1", "1.2.3.4:5678", NETS, "1.2.3.4"),
        ("::ffff:127.0.0.1", "1.2.3.4", NETS, "1.2.3.4"),  # an IPv4-mapped peer
        ("", "1.2.3.4", NETS, "unknown"),  # a unix socket
    ],
)
def test_client_address(
    peer: str, forwarded: str | None, proxies: tuple[Any, ...], expected: str
) -> None:
    environ = {"REMOTE_ADDR": peer, "HTTP_X_FORWARDED_FOR": forwarded}
    assert client_address(environ, proxies) == expected


def test_ipv6_clients_are_counted_per_64() -> None:
    assert counted_as("2001:db8:1:2:aaaa::1") == counted_as("2001:db8:1:2:bbbb::2")
    assert counted_as("2001:db8:1:2::1") == "2001:db8:1:2::/64"
    assert counted_as("2001:db8:1:3::1") != counted_as("2001:db8:1:2::1")
    assert counted_as("192.0.2.1") == "192.0.2.1"


# --- logout ends the session server-side ---------------------------------------------------


def test_logout_ends_every_copy_of_the_cookie(engine: Scripts, r: redis.Redis) -> None:  # noqa: F811
    app = app_of(engine)
    with app.test_client() as browser:
        log_in(browser)
        copied = app_of(engine).test_client()  # another process, another browser
        copied.set_cookie(COOKIE_NAME, session_cookie(browser))
        assert copied.get("/ui").status_code == 200
        records = list(r.scan_iter(K.ui_session("*")))
        assert len(records) == 1
        assert 0 < r.ttl(records[0]) <= SESSION_LIFETIME.total_seconds()
        browser.post("/ui/logout", data={"csrf": csrf_of(browser.get("/ui"))})
        assert not r.exists(records[0])
        assert copied.get("/ui").status_code == 302
        assert copied.get("/events").status_code == 401


def test_a_dashboard_page_reads_its_login_once(
    engine: Scripts,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    app = app_of(engine)
    reads = []
    original = RedisKeyedSessions.session_alive
    monkeypatch.setattr(
        RedisKeyedSessions,
        "session_alive",
        lambda self, sid: reads.append(sid) or original(self, sid),
    )
    with app.test_client() as browser:
        log_in(browser)
        reads.clear()
        assert browser.get("/ui").status_code == 200
        assert len(reads) == 1
        reads.clear()
        assert browser.get("/stats", headers=RIGHT).status_code == 200  # the API: none
        assert reads == []


# --- Cache-Control -------------------------------------------------------------------------


def test_pages_and_replies_with_payloads_are_no_store(engine: Scripts) -> None:  # noqa: F811
    with app_of(engine).test_client() as browser:
        created = browser.post("/enqueue", json={"type": "a", "payload": {"x": 1}}, headers=RIGHT)
        assert created.headers["Cache-Control"] == "no-store"
        job = created.get_json()["id"]
        for path in (f"/jobs/{job}", "/jobs", "/dlq", "/stats"):
            assert browser.get(path, headers=RIGHT).headers["Cache-Control"] == "no-store", path
        assert browser.get("/stats", headers=WRONG).headers["Cache-Control"] == "no-store"
        assert browser.get("/ui/login").headers["Cache-Control"] == "no-store"
        log_in(browser)
        for path in ("/ui", f"/ui/jobs/{job}", "/ui/jobs", "/ui/dlq"):
            assert browser.get(path).headers["Cache-Control"] == "no-store", path
        assert browser.get("/ui/static/ui.css").headers.get("Cache-Control") != "no-store"


# --- the settings --------------------------------------------------------------------------


def test_the_threshold_is_a_setting(engine: Scripts) -> None:  # noqa: F811
    client = app_of(engine, TASKFORGE_AUTH_MAX_FAILURES="3").test_client()
    assert guess(client, 3) == [401, 401, 429]


def test_trusted_proxies_parse_addresses_and_networks_and_refuse_anything_else() -> None:
    settings = Settings.from_env({"TASKFORGE_TRUSTED_PROXIES": " 10.0.0.5, 192.168.0.0/16,::1 "})
    assert [str(n) for n in settings.trusted_proxies] == [
        "10.0.0.5/32",
        "192.168.0.0/16",
        "::1/128",
    ]
    assert "TASKFORGE_TRUSTED_PROXIES=10.0.0.5/32,192.168.0.0/16,::1/128" in summary(settings)
    for bad in ("proxy.example", "10.0.0.0/33", "10.0.0.1;10.0.0.2"):
        with pytest.raises(ConfigError, match="TASKFORGE_TRUSTED_PROXIES"):
            Settings.from_env({"TASKFORGE_TRUSTED_PROXIES": bad})
    with pytest.raises(ConfigError, match="TASKFORGE_AUTH_MAX_FAILURES"):
        Settings.from_env({"TASKFORGE_AUTH_MAX_FAILURES": "0"})
