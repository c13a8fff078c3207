"""The dashboard's forms change the engine's state: pause and resume a queue, quiet a host,
replay, purge and cancel a job (each destructive one after its confirmation page)."""

from __future__ import annotations

import re

import redis
from flask.testing import FlaskClient

from shared.scripts import Scripts
from tests.gateway.test_ui import (  # noqa: F401
    K,
    csrf_of,
    engine,
    post,
    put,
    put_dead,
    text,
    ui,
)

HOST = "box-1-4242"


def test_pause_then_resume_a_queue_from_its_row(ui: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    put(engine, "mail")
    page = text(ui.get("/ui/queues"))
    assert re.search(r'<tr data-queue="mail">.*?<td class="state">active</td>', page, re.S)
    assert 'action="/ui/queues/mail/pause"' in page

    paused = post(ui, "/ui/queues/mail/pause", "/ui/queues")

    assert (paused.status_code, paused.location) == (303, "/ui/queues")
    assert engine.redis.exists(K.for_queue("mail").paused)
    page = text(ui.get("/ui/queues"))
    assert re.search(r'<tr data-queue="mail">.*?<td class="state">paused</td>', page, re.S)
    assert '<form class="resume" method="post" action="/ui/queues/mail/resume">' in page
    assert "Queue mail paused" in page  # the flash message

    post(ui, "/ui/queues/mail/resume", "/ui/queues")

    assert not engine.redis.exists(K.for_queue("mail").paused)
    assert re.search(
        r'<tr data-queue="mail">.*?<td class="state">active</td>', text(ui.get("/ui/queues")), re.S
    )


def test_a_bad_queue_name_is_a_400_page(ui: FlaskClient) -> None:  # noqa: F811
    assert post(ui, "/ui/queues/b%20d/pause", "/ui/queues").status_code == 400


def beat(engine: Scripts) -> None:  # noqa: F811
    """Register a workerd host as its supervisor's heartbeat does."""
    fields = {"host": "box-1", "pid": 4242, "workers": 3, "busy": 1, "plan": "default"}
    engine.heartbeat(HOST, fields, ttl_ms=60_000)


def test_workers_lists_hosts_and_quiet_asks_one(ui: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    beat(engine)
    page = text(ui.get("/ui/workers"))
    assert f'<tr data-host="{HOST}">' in page and "1 / 3" in page

    response = post(ui, f"/ui/workers/{HOST}/quiet", "/ui/workers")

    assert (response.status_code, response.location) == (303, "/ui/workers")
    assert engine.redis.hget(K.worker(HOST), "quiet_request") == b"1"
    assert "quiet requested" in text(ui.get("/ui/workers"))


def test_quieting_an_unknown_host_is_a_404_page(ui: FlaskClient) -> None:  # noqa: F811
    assert post(ui, "/ui/workers/gone-1/quiet", "/ui/queues").status_code == 404


def test_replay_asks_first_then_replays(ui: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    job_id = put_dead(engine)
    job_page = f"/ui/jobs/{job_id}"

    confirm = post(ui, f"/ui/jobs/{job_id}/replay", job_page)

    body = text(confirm)
    assert confirm.status_code == 200 and 'data-page="confirm"' in body
    assert '<button id="confirm-yes"' in body and f'id="confirm-no" href="{job_page}"' in body
    assert f"<code>{job_id}</code>" in body
    assert engine.redis.hget(K.job(job_id), "status") == b"dead"  # nothing yet

    done = ui.post(f"/ui/jobs/{job_id}/replay", data={"csrf": csrf_of(confirm), "confirm": "yes"})

    assert (done.status_code, done.location) == (303, job_page)
    assert engine.redis.hget(K.job(job_id), "status") == b"pending"
    page = text(ui.get(job_page))
    assert '<li data-event="replayed">' in page and 'id="job-status"' in page
    assert '<form id="replay"' not in page


def test_replaying_a_job_no_longer_dead_says_so(ui: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    job_id = put_dead(engine)
    engine.replay(job_id)  # another operator was quicker
    response = post(ui, f"/ui/jobs/{job_id}/replay", f"/ui/jobs/{job_id}", confirm="yes")
    assert response.status_code == 303
    assert "not dead" in text(ui.get(response.location))


def test_purge_from_the_job_page(ui: FlaskClient, engine: Scripts, r: redis.Redis) -> None:  # noqa: F811
    job_id = put_dead(engine)
    response = post(ui, f"/ui/jobs/{job_id}/purge", f"/ui/jobs/{job_id}", confirm="yes")
    assert (response.status_code, response.location) == (303, "/ui/dlq")
    assert not r.exists(K.job(job_id))


def test_cancel_a_pending_job_after_confirming(ui: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    job_id = put(engine)
    first = post(ui, f"/ui/jobs/{job_id}/cancel", f"/ui/jobs/{job_id}")
    assert 'data-page="confirm"' in text(first)
    assert engine.redis.hget(K.job(job_id), "status") == b"pending"

    post(ui, f"/ui/jobs/{job_id}/cancel", f"/ui/jobs/{job_id}", confirm="yes")

    assert engine.redis.hget(K.job(job_id), "status") == b"canceled"


def test_dlq_lists_dead_jobs_with_checkboxes_and_filters(ui: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    mail = put_dead(engine, "mail", type="email")
    pdf = put_dead(engine, "pdf", type="render")
    page = text(ui.get("/ui/dlq"))
    for job_id in (mail, pdf):
        assert f'<tr data-job-id="{job_id}">' in page
        assert f'<input type="checkbox" name="id" value="{job_id}"' in page
    for button in ("replay-selected", "purge-selected", "replay-all", "purge-all"):
        assert f'id="{button}"' in page
    filtered = text(ui.get("/ui/dlq?queue=pdf"))
    assert f'data-job-id="{pdf}"' in filtered and f'data-job-id="{mail}"' not in filtered
    assert '<input type="hidden" name="queue" value="pdf">' in filtered


def test_dlq_selected_asks_with_the_ids(ui: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    ids = [put_dead(engine) for _ in range(2)]
    confirm = post(ui, "/ui/dlq/act", "/ui/dlq", op="purge-selected", id=ids)
    body = text(confirm)
    assert 'data-page="confirm"' in body and "these 2 dead jobs" in body
    for job_id in ids:
        assert f'<input type="hidden" name="id" value="{job_id}">' in body
    assert all(engine.redis.exists(K.job(job_id)) for job_id in ids)  # nothing yet


def test_dlq_all_asks_with_the_count(ui: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    for _ in range(3):
        put_dead(engine, "mail")
    body = text(post(ui, "/ui/dlq/act", "/ui/dlq?queue=mail", op="replay-all", queue="mail"))
    assert "every dead job in queue mail (3 dead there now)" in body


def test_dlq_selected_with_nothing_selected_says_so(ui: FlaskClient) -> None:  # noqa: F811
    response = post(ui, "/ui/dlq/act", "/ui/dlq", op="replay-selected")
    assert response.status_code == 303
    assert "Select at least one job" in text(ui.get(response.location))
