"""The dashboard's forms change the engine's state: pause and resume a queue, quiet a host,
replay, purge and cancel a job (each destructive one after its confirmation page)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
import redis
from flask.testing import FlaskClient

from gateway.ui import dlq_pages as dlq
from gateway.ui.ui_base import counted
from shared.engine.scripts import Scripts
from shared.model.job_ids import new_job_id
from shared.model.schedules import parse_entry
from shared.read.directory import QueueDirectory
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
from workerd.periodic import Periodic

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


def test_an_empty_queue_offers_delete_which_asks_first_then_deletes(
    ui: FlaskClient,  # noqa: F811
    engine: Scripts,  # noqa: F811
) -> None:
    job_id = put(engine, "old")
    put(engine, "busy")
    engine.cancel(job_id, queue="old")
    page = text(ui.get("/ui/queues"))
    assert 'action="/ui/queues/old/delete"' in page
    assert 'action="/ui/queues/busy/delete"' not in page  # a pending job: not offered
    assert 'action="/ui/queues/default/delete"' not in page

    asked = post(ui, "/ui/queues/old/delete", "/ui/queues")
    assert asked.status_code == 200 and "Delete queue old?" in text(asked)
    assert engine.redis.sismember(K.queues, "old")  # nothing yet

    deleted = post(ui, "/ui/queues/old/delete", "/ui/queues", confirm="yes")

    assert (deleted.status_code, deleted.location) == (303, "/ui/queues")
    page = text(ui.get("/ui/queues"))
    assert "Queue old deleted." in page and '<tr data-queue="old">' not in page
    assert not engine.redis.sismember(K.queues, "old")


def test_a_delete_the_server_refuses_says_why(ui: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    put(engine, "busy")
    refused = post(ui, "/ui/queues/busy/delete", "/ui/queues", confirm="yes")
    assert (refused.status_code, refused.location) == (303, "/ui/queues")
    assert "Queue busy kept: the queue is not empty: 1 pending." in text(ui.get("/ui/queues"))
    assert post(ui, "/ui/queues/never/delete", "/ui/queues", confirm="yes").status_code == 404


def test_a_delete_without_the_csrf_token_is_refused(ui: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    QueueDirectory(engine).relist("old")
    refused = ui.post("/ui/queues/old/delete", data={"confirm": "yes"})
    assert refused.status_code == 400
    assert engine.redis.sismember(K.queues, "old")


BUSY_JOB = "0f0e0d0c-0b0a-4908-8706-050403020100"


def beat(engine: Scripts) -> None:  # noqa: F811
    """Register a workerd host as its supervisor's heartbeat does, one process busy."""
    procs = [
        {"pid": 501, "job_id": BUSY_JOB, "type": "pdf", "queue": "default",
         "busy_since_ms": 1_800_000_000_000, "beat_ms": 1_800_000_001_000},
        {"pid": 502, "beat_ms": 1_800_000_001_000},
    ]  # fmt: skip
    fields = {"host": "box-1", "pid": 4242, "workers": 2, "busy": 1, "plan": "default"}
    engine.heartbeat(HOST, {**fields, "procs": json.dumps(procs)}, ttl_ms=60_000)


def test_workers_lists_hosts_and_quiet_asks_one(ui: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    beat(engine)
    page = text(ui.get("/ui/workers"))
    assert f'<tr data-host="{HOST}">' in page and "1 / 2" in page
    busy = re.search(r'<tr data-pid="501">(.*?)</tr>', page, re.S)
    assert busy, "each process has its row"
    assert f'href="/ui/jobs/{BUSY_JOB}"' in busy.group(1) and "pdf" in busy.group(1)
    assert "2027-01-15T08:00:00.000Z" in busy.group(1)  # busy since
    idle = re.search(r'<tr data-pid="502">(.*?)</tr>', page, re.S)
    assert idle and "idle" in idle.group(1)

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


def test_dlq_one_selected_asks_in_the_singular(ui: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    body = text(post(ui, "/ui/dlq/act", "/ui/dlq", op="replay-selected", id=[put_dead(engine)]))
    assert "Replay this 1 dead job?" in body and "dead jobs?" not in body


def test_dlq_all_asks_with_the_count(ui: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    for _ in range(3):
        put_dead(engine, "mail")
    body = text(post(ui, "/ui/dlq/act", "/ui/dlq?queue=mail", op="replay-all", queue="mail"))
    assert "every dead job in queue mail (3 dead there now)" in body


def test_dlq_all_of_a_type_names_the_type_first(ui: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    put_dead(engine, "mail", type="email")
    body = text(post(ui, "/ui/dlq/act", "/ui/dlq?type=email", op="replay-all", type="email"))
    assert "every dead job of type email, in every queue?" in body


def test_dlq_selected_with_nothing_selected_says_so(ui: FlaskClient) -> None:  # noqa: F811
    response = post(ui, "/ui/dlq/act", "/ui/dlq", op="replay-selected")
    assert response.status_code == 303
    assert "Select at least one job" in text(ui.get(response.location))


# --- bulk DLQ actions (shared.read.bulk.bulk_dead) ------------------------------------------------


def test_dlq_replay_selected_replays_those_only(ui: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    chosen = [put_dead(engine) for _ in range(2)]
    left = put_dead(engine)

    response = post(ui, "/ui/dlq/act", "/ui/dlq", op="replay-selected", id=chosen, confirm="yes")

    assert (response.status_code, response.location) == (303, "/ui/dlq")
    status = {job_id: engine.redis.hget(K.job(job_id), "status") for job_id in [*chosen, left]}
    assert status == {chosen[0]: b"pending", chosen[1]: b"pending", left: b"dead"}
    assert "2 replayed, 0 skipped" in text(ui.get("/ui/dlq"))


def test_dlq_purge_all_matching_the_filter(ui: FlaskClient, engine: Scripts) -> None:  # noqa: F811
    mail = [put_dead(engine, "mail", type="email") for _ in range(3)]
    other_type = put_dead(engine, "mail", type="sms")
    other_queue = put_dead(engine, "pdf", type="email")

    post(ui, "/ui/dlq/act", "/ui/dlq", op="purge-all", queue="mail", type="email", confirm="yes")

    assert not any(engine.redis.exists(K.for_queue("mail").job(j)) for j in mail)
    assert engine.redis.exists(K.for_queue("mail").job(other_type))
    assert engine.redis.exists(K.for_queue("pdf").job(other_queue))


def test_dlq_all_stops_at_its_bound_and_continues(
    ui: FlaskClient,  # noqa: F811
    engine: Scripts,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dlq, "BATCH", 2)
    monkeypatch.setattr(dlq, "PER_REQUEST", 3)
    ids = [put_dead(engine, "mail") for _ in range(5)]

    first = post(ui, "/ui/dlq/act", "/ui/dlq", op="replay-all", queue="mail", confirm="yes")

    body = text(first)
    assert first.status_code == 200 and 'data-page="confirm"' in body
    assert "more remain" in body
    cursor = re.search(r'name="cursor" value="([^"]+)"', body)
    assert cursor
    dead = [j for j in ids if engine.redis.hget(K.for_queue("mail").job(j), "status") == b"dead"]
    assert len(dead) == 5 - 4  # two batches of two: the bound of three reached after the second

    done = ui.post(
        "/ui/dlq/act",
        data={"csrf": csrf_of(first), "op": "replay-all", "queue": "mail", "type": "",
              "cursor": cursor.group(1), "confirm": "yes"},
    )  # fmt: skip

    assert (done.status_code, done.location) == (303, "/ui/dlq?queue=mail")
    statuses = {engine.redis.hget(K.for_queue("mail").job(j), "status") for j in ids}
    assert statuses == {b"pending"}


def test_the_schedules_page_lists_next_runs_and_pauses_then_resumes_one(
    ui: FlaskClient,  # noqa: F811
    engine: Scripts,  # noqa: F811
) -> None:
    assert "No periodic schedules" in text(ui.get("/ui/schedules"))
    nightly = parse_entry(
        "nightly", {"cron": "0 3 * * *", "timezone": "Europe/Berlin", "job": {"type": "pdf"}}
    )
    Periodic(engine, [nightly]).publish()
    page = text(ui.get("/ui/schedules"))
    row = re.search(r'<tr data-schedule="nightly">.*?</tr>', page, re.S)
    assert row is not None
    assert '<td class="state">active</td>' in row[0] and "Europe/Berlin" in row[0]
    assert len(re.findall(r'<li><span class="zoned">', row[0])) == 5
    assert 'action="/ui/schedules/nightly/pause"' in row[0]

    paused = post(ui, "/ui/schedules/nightly/pause", "/ui/schedules")

    assert (paused.status_code, paused.location) == (303, "/ui/schedules")
    assert engine.redis.hexists(K.schedule("nightly"), "paused")
    page = text(ui.get("/ui/schedules"))
    assert "Schedule nightly paused" in page
    assert 'action="/ui/schedules/nightly/resume"' in page
    row = re.search(r'<tr data-schedule="nightly">.*?</tr>', page, re.S)
    assert row is not None and '<td class="state">paused</td>' in row[0]
    # No next runs while paused (as the CLI's "(paused)"): none will happen until a resume.
    assert '<ul class="runs">' not in row[0] and "(paused: none until resumed)" in row[0]
    post(ui, "/ui/schedules/nightly/resume", "/ui/schedules")
    assert not engine.redis.hexists(K.schedule("nightly"), "paused")
    assert post(ui, "/ui/schedules/other/pause", "/ui/schedules").status_code == 404
    assert post(ui, "/ui/schedules/b%20d/pause", "/ui/schedules").status_code == 400
    # A form without its CSRF token changes nothing.
    assert ui.post("/ui/schedules/nightly/pause").status_code == 400
    assert not engine.redis.hexists(K.schedule("nightly"), "paused")


def test_the_schedules_page_shows_last_tick_and_next_runs_in_the_schedules_named_zone(
    ui: FlaskClient,  # noqa: F811
    engine: Scripts,  # noqa: F811
) -> None:
    tokyo = parse_entry(
        "tokyo-open", {"cron": "0 9 * * 1-5", "timezone": "Asia/Tokyo", "job": {"type": "pdf"}}
    )
    Periodic(engine, [tokyo]).publish()
    tick = datetime(2026, 12, 4, 0, 0, tzinfo=UTC)  # a Friday 09:00 in Tokyo (UTC+9)
    assert engine.advance_schedule("tokyo-open", int(tick.timestamp() * 1000), None)
    page = text(ui.get("/ui/schedules"))
    assert "Every time here is in its schedule's own zone and names it" in page
    row = re.search(r'<tr data-schedule="tokyo-open">.*?</tr>', page, re.S)
    assert row is not None
    # Each time: the zoned text, then a <time> times.js fills ("in 3 min"), with the same
    # instant in the zone's offset and the zoned text as its title (never a UTC time).
    shown = re.findall(
        r'<span class="zoned">([^<]*) Asia/<wbr>Tokyo</span> '
        r'<time class="ago" datetime="([^"]+)" title="([^"]+)"></time>',
        row[0],
    )
    assert len(shown) == 6, row[0]  # the last tick and the next 5 runs
    last, *runs = shown
    assert last == (
        "2026-12-04 09:00:00",
        "2026-12-04T09:00:00+09:00",
        "2026-12-04 09:00:00 Asia/Tokyo",
    )
    for clock, moment, title in runs:
        assert re.fullmatch(r"\d{4}-\d\d-\d\d 09:00:00", clock), runs
        assert moment == clock.replace(" ", "T") + "+09:00"
        assert title == f"{clock} Asia/Tokyo"
        assert datetime.fromisoformat(moment).weekday() < 5  # 1-5: weekdays in Tokyo
    assert "Z" not in "".join(moment for _, moment, _ in shown)  # no UTC time on the row


def test_the_last_job_shows_its_whole_id_linked_to_its_page(
    ui: FlaskClient,  # noqa: F811
    engine: Scripts,  # noqa: F811
) -> None:
    # Every job id of a queue starts with the same 8 hex digits (a hash of the queue's name):
    # only the whole id tells one tick's job from another's.
    beat = parse_entry("beat", {"every": "1m", "job": {"type": "pdf"}})
    Periodic(engine, [beat]).publish()
    earlier, later = new_job_id("default"), new_job_id("default")
    assert earlier[:8] == later[:8]
    assert engine.advance_schedule("beat", 60_000, earlier)
    assert engine.advance_schedule("beat", 120_000, later)
    row = re.search(r'<tr data-schedule="beat">.*?</tr>', text(ui.get("/ui/schedules")), re.S)
    assert row is not None
    link = f'<td class="id"><a href="/ui/jobs/{later}"><code>{later}</code></a></td>'
    assert link in row[0], row[0]


def test_counted_says_one_thing_or_many() -> None:
    assert counted(1, "queue") == "1 queue"
    assert (counted(0, "queue"), counted(1200, "queue")) == ("0 queues", "1,200 queues")
    assert counted(2, "worker process", "worker processes") == "2 worker processes"
