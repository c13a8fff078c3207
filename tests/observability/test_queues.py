"""Queues everywhere: every job line, counter and histogram names its queue; /stats and
/metrics count per queue; the OpenAPI document states the queue field.

The lifecycle walk runs the gateway app, a worker, the scheduler and the release duty in this
process on the private Redis, their loops stepped by hand, with one job after another in
queue "q1" through every outcome that writes a line. The rest reads real Redis with two
queues; one test runs a real workerd serving two queues by weight.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jsonschema_rs
import pytest
import redis
from flask.testing import FlaskClient
from prometheus_client import REGISTRY

import workerd.demo  # noqa: F401 (registers the demo handlers)
from gateway.openapi import document
from shared.engine.engine_types import Policy
from shared.engine.lifecycle import Outcome, Transition
from shared.engine.queries import QueueCounts
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, format_ms, validate_enqueue
from shared.model.queues import QUEUE_PATTERN
from shared.obs import metrics
from shared.read import state_gauges
from shared.read.state_gauges import QueueStateCollector
from shared.settings.config import Settings
from tests.fakes import IdleSlot
from tests.gateway.conftest import make_app
from tests.observability.conftest import samples
from tests.support.tools import ROOT, wait_until
from tests.support.workerd import Workerd
from workerd.duties.release import OrphanedJob, Release
from workerd.scheduler import SchedulerProcess
from workerd.worker import WorkerProcess

QUEUE = "q1"
HOUR_MS = 3_600_000


@dataclass
class Stack:
    """The gateway app, a worker serving only QUEUE, a scheduler and a release duty."""

    app: FlaskClient
    scripts: Scripts
    worker: WorkerProcess
    scheduler: SchedulerProcess
    release: Release

    def enqueue(self, body: dict[str, Any], key: str | None = None, status: int = 201) -> str:
        headers = {"Idempotency-Key": key} if key else {}
        reply = self.app.post("/enqueue", json={**body, "queue": QUEUE}, headers=headers)
        assert reply.status_code == status, reply.get_json()
        assert reply.get_json()["queue"] == QUEUE
        return reply.get_json()["id"]

    def run_one(self) -> None:
        """Step the worker until it has run one job (bounded)."""
        deadline = time.monotonic() + 5
        before = self.worker.jobs_done
        while self.worker.jobs_done == before:
            assert time.monotonic() < deadline, "the worker ran no job"
            self.worker.step()
        assert self.worker.next_job is None  # one job in the queue at a time here

    def claim_for(self, worker_id: str, job_id: str) -> int:
        """Claim the queue's only pending job for a worker that is not running; return its token."""
        job = self.scripts.claim(worker_id, queue=QUEUE)
        assert job is not None and job.id == job_id
        return job.token

    def orphan(self, orphan: OrphanedJob) -> None:
        self.release.owed.append(orphan)
        self.release.tick(time.monotonic())
        assert self.release.owed == []


@pytest.fixture
def stack(r: redis.Redis) -> Stack:
    scripts = Scripts(r, policy=Policy(retry_base_ms=1, retry_max_ms=1))
    scripts.load()
    settings = Settings.from_env({"WORKER_QUEUES": QUEUE})
    return Stack(
        app=make_app(scripts).test_client(),
        scripts=scripts,
        worker=WorkerProcess(settings, scripts, IdleSlot(), "w1", os.getppid()),
        scheduler=SchedulerProcess(
            scripts, IdleSlot(), os.getppid(), reconnect_grace=0, served=(QUEUE,)
        ),
        release=Release(scripts, redis_url="redis://private", queues=("default", QUEUE)),
    )


@pytest.fixture(autouse=True)
def fresh_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    # Other tests' types and queues must not push these past the label caps.
    monkeypatch.setattr(metrics, "_seen_types", set())
    monkeypatch.setattr(metrics, "_seen_queues", set())


def counted(name: str, queue: str = QUEUE) -> float:
    """Return a metric's samples summed over every label set of one queue."""
    found = 0.0
    for family in REGISTRY.collect():
        for sample in family.samples:
            if sample.name == name and sample.labels.get("queue") == queue:
                found += sample.value
    return found


COUNTERS = [f"taskforge_jobs_{event}_total" for event in metrics.LIFECYCLE_EVENTS]
HISTOGRAMS = [
    "taskforge_handler_duration_seconds_count",
    "taskforge_queue_wait_seconds_count",
    "taskforge_schedule_lateness_seconds_count",
]


def test_a_job_in_q1_writes_q1_on_every_line_counter_and_histogram_of_its_life(
    stack: Stack, transitions: list[Transition], caplog: pytest.LogCaptureFixture
) -> None:
    names = COUNTERS + HISTOGRAMS
    before = {name: counted(name) for name in names}
    before_default = {name: counted(name, "default") for name in names}
    with caplog.at_level(logging.DEBUG):
        soon = format_ms(int(time.time() * 1000) + 60_000)
        done = stack.enqueue({"type": "demo.noop", "scheduled_at": soon}, key="once")
        assert stack.enqueue({"type": "demo.noop", "scheduled_at": soon}, "once", 200) == done
        stack.scheduler.step(-1.0, now_ms=int(time.time() * 1000) + HOUR_MS)  # promoted
        stack.run_one()  # claimed, started, completed

        failing = stack.enqueue({"type": "demo.fail", "max_retries": 2})
        stack.run_one()  # retry scheduled
        stack.scheduler.step(-1.0, now_ms=int(time.time() * 1000) + HOUR_MS)  # promoted
        stack.run_one()  # dead
        assert stack.app.post(f"/dlq/{failing}/retry").status_code == 200  # replayed
        assert stack.app.post(f"/jobs/{failing}/cancel").status_code == 200  # canceled

        purged = stack.enqueue({"type": "demo.fail", "max_retries": 1})
        stack.run_one()  # dead at once
        assert stack.app.delete(f"/dlq/{purged}").status_code == 204  # purged

        lost = stack.enqueue({"type": "demo.noop"})
        stack.claim_for("a-worker-that-dies", lost)
        lease_over = int(time.time() * 1000) + stack.scripts.policy.lease_ms + 1000
        stack.scheduler.step(time.monotonic(), now_ms=lease_over)  # recovered: lease expired
        stack.claim_for("lost-again", lost)  # (done with it: claimed and left alone)

        drained = stack.enqueue({"type": "demo.noop"})
        stack.claim_for("w-drained", drained)
        stack.orphan(OrphanedJob("", 0, "drain", claimed_by="w-drained"))  # released
        stack.claim_for("w-drained-again", drained)

        died = stack.enqueue({"type": "demo.noop"})
        stack.claim_for("w-died", died)
        stack.orphan(OrphanedJob(died, 0, "worker died", claimed_by="w-died"))  # recovered
        stack.claim_for("w-died-again", died)

        timed_out = stack.enqueue({"type": "demo.noop"})
        token = stack.claim_for("w-timed-out", timed_out)
        stack.orphan(OrphanedJob(timed_out, token, "timeout", 1.0, QUEUE))  # timed out: retrying
        stack.scheduler.step(-1.0, now_ms=int(time.time() * 1000) + HOUR_MS)  # promoted
        stack.claim_for("w-timed-out-again", timed_out)

        handed = stack.enqueue({"type": "demo.noop"})
        stack.worker.next_job = stack.scripts.claim("w1", queue=QUEUE)
        assert stack.worker.next_job is not None and stack.worker.next_job.id == handed
        stack.worker.stopping = True
        assert stack.worker.run() == 0  # stopping: it hands back the job it had not started

    lines = [rec for rec in caplog.records if rec.getMessage().startswith("job_")]
    assert {rec.getMessage() for rec in lines} == {
        "job_enqueued",
        "job_claimed",
        "job_started",
        "job_completed",
        "job_retry_scheduled",
        "job_promoted",
        "job_dead",
        "job_replayed",
        "job_canceled",
        "job_purged",
        "job_recovered",
        "job_released",
        "job_timed_out",
    }
    assert {(rec.getMessage(), rec.queue) for rec in lines} == {  # type: ignore[attr-defined]
        (rec.getMessage(), QUEUE) for rec in lines
    }
    assert done in {rec.job_id for rec in lines if rec.getMessage() == "job_completed"}  # type: ignore[attr-defined]
    assert set(Outcome) - {t.outcome for t in transitions} == {
        Outcome.STALE_ACK,
        Outcome.STALE_FAILURE,
        Outcome.TIMED_OUT_DEAD,
        Outcome.TIMED_OUT_STALE,
        Outcome.RECOVERY_CAP,
        # A running job's cancel needs a supervisor's signal: tests/workerd/test_cancel.py and
        # tests/gateway/test_cancel_running.py check their lines (queue included).
        Outcome.CANCEL_REQUESTED,
        Outcome.CANCELED_RUNNING,
    }
    assert {t.queue for t in transitions} == {QUEUE}

    grown = {name: counted(name) - before[name] for name in names}
    assert grown == {
        "taskforge_jobs_enqueued_total": 8,
        "taskforge_jobs_claimed_total": 4,  # by the worker; the others claimed by hand
        "taskforge_jobs_completed_total": 1,
        "taskforge_jobs_failed_total": 3,
        "taskforge_jobs_retried_total": 2,  # the failure's and the timeout's
        "taskforge_jobs_dead_total": 2,
        "taskforge_jobs_replayed_total": 1,
        "taskforge_jobs_recovered_total": 2,  # lease expired, worker died
        "taskforge_jobs_released_total": 2,  # drained, handed back
        "taskforge_jobs_canceled_total": 1,
        "taskforge_jobs_cancel_requested_total": 0,
        "taskforge_jobs_timed_out_total": 1,
        "taskforge_jobs_purged_total": 1,
        "taskforge_jobs_stale_acks_total": 0,
        "taskforge_handler_duration_seconds_count": 4,
        "taskforge_queue_wait_seconds_count": 4,
        "taskforge_schedule_lateness_seconds_count": 3,  # a scheduled job, two retries
    }
    assert {name: counted(name, "default") for name in names} == before_default


def test_a_batch_across_queues_logs_and_counts_one_line_per_queue(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = [{"type": "demo.noop", "queue": q} for q in (QUEUE, "default", QUEUE)]
    before = [counted("taskforge_jobs_enqueued_total", q) for q in (QUEUE, "default")]
    with caplog.at_level(logging.DEBUG):  # job_enqueued is a DEBUG line
        reply = stack.app.post("/enqueue/batch", json={"jobs": jobs})
    assert reply.status_code == 201
    ids = [job["id"] for job in reply.get_json()["jobs"]]
    lines = [rec.__dict__ for rec in caplog.records if rec.getMessage() == "job_enqueued"]
    assert [(line["queue"], line["job_ids"], line["count"]) for line in lines] == [
        (QUEUE, [ids[0], ids[2]], 2),
        ("default", [ids[1]], 1),
    ]
    after = [counted("taskforge_jobs_enqueued_total", q) for q in (QUEUE, "default")]
    assert [a - b for a, b in zip(after, before, strict=True)] == [2, 1]


# --- /stats and /metrics, two queues ---------------------------------------------------------


def _seed_two_queues(r: redis.Redis) -> tuple[FlaskClient, Scripts]:
    """Seed q1 (2 pending, 1 dead) and default (1 pending, 1 scheduled, 1 completed)."""
    scripts = Scripts(r)
    app = make_app(scripts).test_client()
    for body in (
        {"type": "a", "queue": QUEUE},
        {"type": "a", "queue": QUEUE},
        {"type": "b"},
        {"type": "b", "scheduled_at": "2099-01-01T00:00:00Z"},
    ):
        assert app.post("/enqueue", json=body).status_code == 201
    dead_id, done_id = str(uuid.uuid4()), str(uuid.uuid4())
    dead = validate_enqueue({"type": "c", "queue": QUEUE, "max_retries": 1, "priority": 9})
    scripts.enqueue(dead, dead_id)
    job = scripts.claim("w", queue=QUEUE)
    assert job is not None and job.id == dead_id
    scripts.fail(dead_id, job.token, "boom", queue=QUEUE)
    scripts.enqueue(validate_enqueue({"type": "c", "priority": 9}), done_id)
    job = scripts.claim("w")
    assert job is not None and job.id == done_id
    scripts.complete(done_id, job.token, "null")
    return app, scripts


def _states(**counts: int) -> dict[str, int]:
    return {str(state): counts.get(str(state), 0) for state in JobState}


def test_stats_counts_each_queue_and_keeps_the_totals(r: redis.Redis) -> None:
    app, _ = _seed_two_queues(r)

    stats = app.get("/stats").get_json()

    assert set(stats["queues"]) == {"default", QUEUE}
    q1, default = stats["queues"][QUEUE], stats["queues"]["default"]
    assert q1["jobs"] == _states(pending=2, dead=1) and q1["total"] == 3
    assert default["jobs"] == _states(pending=1, scheduled=1, completed=1)
    assert default["total"] == 3
    assert stats["jobs"] == _states(pending=3, scheduled=1, completed=1, dead=1)
    assert stats["total"] == 6
    ages = [q1["oldest_pending_age_seconds"], default["oldest_pending_age_seconds"]]
    assert all(age is not None and age >= 0 for age in ages)
    assert stats["oldest_pending_age_seconds"] == max(ages)  # the oldest of all
    validator = _validator("Stats")
    assert validator.is_valid(stats), list(validator.iter_errors(stats))


def test_metrics_label_the_gauges_by_queue_and_a_sum_gives_the_totals(r: redis.Redis) -> None:
    enqueued = {"queue": QUEUE, "type": "a"}
    before = REGISTRY.get_sample_value("taskforge_jobs_enqueued_total", enqueued) or 0
    app, _ = _seed_two_queues(r)
    stats = app.get("/stats").get_json()

    parsed = samples(app.get("/metrics").get_data(as_text=True))

    for queue in ("default", QUEUE):
        gauges = {
            state: parsed[("taskforge_jobs", (("queue", queue), ("state", state)))]
            for state in stats["jobs"]
        }
        assert gauges == stats["queues"][queue]["jobs"]
        age = parsed[("taskforge_oldest_pending_age_seconds", (("queue", queue),))]
        assert age >= 0
    jobs = {labels: v for (name, labels), v in parsed.items() if name == "taskforge_jobs"}
    assert len(jobs) == 2 * len(JobState)  # no unlabelled total beside the queues
    for state, total in stats["jobs"].items():  # sum by (state): the totals /stats gives
        assert sum(v for labels, v in jobs.items() if ("state", state) in labels) == total
    # The counters this process keeps: what the app enqueued, by queue and type.
    counter = parsed[("taskforge_jobs_enqueued_total", tuple(sorted(enqueued.items())))]
    assert counter == before + 2


def test_past_the_label_cap_the_gauges_add_queues_up_under_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics, "QUEUE_LABEL_CAP", 2)

    def counts(pending: int, age: int | None) -> QueueCounts:
        return QueueCounts(_by_state(pending), age)

    combined = QueueCounts.combined(
        {"a": counts(1, 10), "b": counts(2, None), "c": counts(4, 30), "d": counts(8, 20)}
    )
    parsed = samples(state_gauges.render(combined)[0].decode())

    pending = {
        dict(labels)["queue"]: v
        for (name, labels), v in parsed.items()
        if name == "taskforge_jobs" and ("state", "pending") in labels
    }
    assert pending == {"a": 1, "b": 2, metrics.OTHER_QUEUE: 12}  # sorted names first
    ages = {
        dict(labels)["queue"]: v
        for (name, labels), v in parsed.items()
        if name == "taskforge_oldest_pending_age_seconds"
    }
    assert ages == {"a": 0.01, "b": 0, metrics.OTHER_QUEUE: 0.03}


def _by_state(pending: int) -> dict[JobState, int]:
    return {state: pending if state is JobState.PENDING else 0 for state in JobState}


# --- the OpenAPI document --------------------------------------------------------------------


def _validator(schema: str) -> Any:
    doc = document(False)
    root = {"$ref": f"#/components/schemas/{schema}", "components": doc["components"]}
    return jsonschema_rs.validator_for(root)


def test_the_document_states_the_queue_rule_and_the_server_keeps_it(r: redis.Redis) -> None:
    schema = document(False)["components"]["schemas"]
    queue = schema["EnqueueRequest"]["properties"]["queue"]
    assert queue["pattern"] == f"^{QUEUE_PATTERN.pattern}$"
    assert (queue["maxLength"], queue["default"]) == (64, "default")
    assert "queue" in schema["Job"]["required"]
    request, job = _validator("EnqueueRequest"), _validator("Job")
    app = make_app(Scripts(r)).test_client()
    for name in ("critical", "low.priority-2", "Q_1", "x" * 64, "", "a:b", "{x}", "a b", "x" * 65):
        body = {"type": "t", "queue": name}
        reply = app.post("/enqueue", json=body)
        assert (reply.status_code == 201) == request.is_valid(body), name
        if reply.status_code == 201:
            assert reply.get_json()["queue"] == name
            assert job.is_valid(reply.get_json()), list(job.iter_errors(reply.get_json()))
        else:
            assert reply.status_code == 400 and reply.get_json()["fields"][0]["field"] == "queue"
    batch = {"jobs": [{"type": "t", "queue": "q-a"}, {"type": "t"}]}
    assert _validator("BatchRequest").is_valid(batch)
    jobs = app.post("/enqueue/batch", json=batch).get_json()["jobs"]
    assert [j["queue"] for j in jobs] == ["q-a", "default"]


# --- a real workerd serving two queues by weight ----------------------------------------------


def test_workerd_says_which_queues_it_serves_and_labels_its_lines_and_metrics(
    r: redis.Redis, start_workerd: Callable[..., Workerd]
) -> None:
    workerd = start_workerd(WORKER_COUNT="1", WORKER_QUEUES=f"{QUEUE}:3,default:1")
    status, _, body = workerd.http("/health")
    assert status == 200
    assert json.loads(body)["queues"] == {
        "mode": "weighted",
        "names": [QUEUE, "default"],
        "weights": {QUEUE: 3, "default": 1},
    }
    scripts = Scripts(r)
    ids = {}
    for queue in (QUEUE, "default"):
        ids[queue] = str(uuid.uuid4())
        scripts.register_queue(queue)
        scripts.enqueue(validate_enqueue({"type": "demo.noop", "queue": queue}), ids[queue])

    for queue, job_id in ids.items():
        (line,) = workerd.wait_for("job_completed", job_id=job_id)
        assert line["queue"] == queue
        order = list(line)
        assert order[order.index("job_id") :][:4] == ["job_id", "type", "queue", "attempt"]
        (started,) = workerd.events("job_started", job_id=job_id)
        assert started["queue"] == queue

    def scraped() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
        code, _, text = workerd.http("/metrics")
        assert code == 200
        parsed = samples(text.decode())
        key = ("taskforge_jobs", (("queue", "default"), ("state", "completed")))
        # A worker's counts can reach the files a moment after Redis's states (they are held
        # for up to shared.obs.held_writes.FLUSH_INTERVAL): wait for both.
        counted = [
            parsed.get(
                ("taskforge_jobs_completed_total", (("queue", queue), ("type", "demo.noop")))
            )
            for queue in (QUEUE, "default")
        ]
        return parsed if parsed.get(key) == 1 and counted == [1, 1] else None

    parsed = wait_until(scraped, 10, "workerd's /metrics to show both jobs completed")
    for queue in (QUEUE, "default"):
        labels = (("queue", queue), ("type", "demo.noop"))
        assert parsed[("taskforge_jobs_completed_total", labels)] == 1
        assert parsed[("taskforge_handler_duration_seconds_count", labels)] == 1
        assert parsed[("taskforge_jobs", (("queue", queue), ("state", "completed")))] == 1


# --- the docs ---------------------------------------------------------------------------------


def test_the_docs_give_every_metric_its_labels() -> None:
    text = (ROOT / "docs" / "OBSERVABILITY.md").read_text()
    documented = {
        name: set(labels.split(","))
        for name, labels in re.findall(r"`(taskforge_[a-z_<>]+)\{([a-z_,]+)\}`", text)
    }
    counts = QueueCounts.combined({"default": QueueCounts(_by_state(1), 5)})
    exported = {
        sample.name: set(sample.labels)
        for family in QueueStateCollector(counts).collect()
        for sample in family.samples
    }
    exported["taskforge_jobs_all_queues"] = {
        label
        for family in state_gauges.AllQueuesCollector(
            state_gauges.AllQueues(1, counts, 0)
        ).collect()
        for sample in family.samples
        if sample.name == "taskforge_jobs_all_queues"
        for label in sample.labels
    }
    for histogram in (
        metrics.HANDLER_SECONDS,
        metrics.QUEUE_WAIT_SECONDS,
        metrics.SCHEDULE_LATENESS_SECONDS,
    ):
        exported[histogram._name] = set(histogram._labelnames)
    exported["taskforge_jobs_<event>_total"] = set(metrics.LIFECYCLE["enqueued"]._labelnames)
    assert {name: documented.get(name) for name in exported} == exported
