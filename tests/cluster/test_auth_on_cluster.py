"""The gateway's lockout and server-side logout on a real Redis Cluster:
their keys live in the global slot, read and written by pipelines of one key each."""

from __future__ import annotations

from flask import Flask

from gateway import create_app
from gateway.lockout import MAX_FAILURES
from gateway.ui.security import COOKIE_NAME
from shared.settings.config import Settings
from tests.gateway.test_ui import csrf_of
from tests.gateway.test_ui_security import log_in, session_cookie
from tests.support.cluster import RedisCluster

TOKEN = "cluster-token"
RIGHT = {"Authorization": f"Bearer {TOKEN}"}
WRONG = {"Authorization": "Bearer guess"}


def app_on(cluster: RedisCluster) -> Flask:
    """Return one more gateway process's app on the cluster."""
    url = f"redis+cluster://{cluster.seeds}"
    settings = Settings.from_env({"REDIS_URL": url, "TASKFORGE_API_TOKEN": TOKEN})
    app = create_app(settings)
    app.testing = True
    return app


def test_the_lockout_is_shared_by_two_processes_on_a_cluster(cluster: RedisCluster) -> None:
    first, second = app_on(cluster).test_client(), app_on(cluster).test_client()
    statuses = [first.get("/stats", headers=WRONG).status_code for _ in range(MAX_FAILURES - 1)]
    assert statuses == [401] * (MAX_FAILURES - 1)
    locked = second.get("/stats", headers=WRONG)
    assert locked.status_code == 429 and int(locked.headers["Retry-After"]) >= 1
    assert first.get("/stats", headers=RIGHT).status_code == 429


def test_logout_ends_a_copied_session_on_a_cluster(cluster: RedisCluster) -> None:
    with app_on(cluster).test_client() as browser:
        log_in(browser, token=TOKEN)
        copied = app_on(cluster).test_client()
        copied.set_cookie(COOKIE_NAME, session_cookie(browser))
        assert copied.get("/ui").status_code == 200
        browser.post("/ui/logout", data={"csrf": csrf_of(browser.get("/ui"))})
        assert copied.get("/ui").status_code == 302
