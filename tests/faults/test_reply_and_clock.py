"""Fault scenarios (docs/RELIABILITY.md): lost replies on enqueue (through gunicorn) and on fail (9), and a
worker host whose wall clock is 30 s ahead or behind (12).

Every test prints a ``FAULT-FIGURES`` line (run with ``-s``) for bench/FAULTS.md. Processes
come from tests/workerd/conftest.py's ``start_workerd`` (leftovers fail the test) and
tests/gateway/conftest.py's ``run_gunicorn`` (always stopped, SIGTERM then SIGKILL).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import format_ms, parse_rfc3339_ms
from tests.faults.checker import FAILED, OK, UNKNOWN, EnqueueRecord, check, read_journal
from tests.faults.clock_tools import faketime_env, observed_offset, redis_now_ms
from tests.faults.harness import (
    FAULT_ENV,
    enqueue_one,
    log_time,
    print_figures,
    script_sha,
    settled,
    wait_settled,
)
from tests.support.gunicorn import run_gunicorn
from tests.support.redis_server import RedisServer
from tests.support.stats import percentile
from tests.support.tcp_proxy import TcpProxy
from tests.support.tools import wait_until
from tests.support.workerd import Workerd
from tests.workerd.conftest import start_workerd  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow
KEYS = Keys()


# -- a proxy that loses several replies in a row ---------------------------------------------


# -- scenario 9 (i): lost replies on enqueue, through the real gateway -----------------------

ENQUEUE_SHA = script_sha("enqueue")
LATENCY = 0.6  # s the proxy holds Redis's reply to the gateway in a `client_timeout` fault
CLIENT_TIMEOUT = 0.3  # s an impatient client waits in that fault (the gateway still answers)
PATIENT_TIMEOUT = 10.0  # s a client waits otherwise (the gateway answers 503 within ~2 s)
CAREFUL_TRIES = 5
# One cycle of faults: `drop1` loses one reply of the enqueue script (the gateway's redis-py
# retries once), `drop2` loses that retry's too (503), `client_timeout` delays the reply past
# the client's patience, `paused` holds the request until the gateway gives up (503) and then
# resets the connection (the script never runs), `invalid` is a definite 400.
PLAN = ("none", "drop1", "none", "drop2", "none", "client_timeout", "none", "paused", "invalid")


@dataclass
class Request:
    """One client request: its tag (also its Idempotency-Key when keyed) and what came back."""

    tag: str
    keyed: bool
    fault: str
    body: dict[str, Any]
    outcome: str = ""
    first_outcome: str = ""
    job_id: str | None = None
    statuses: tuple[int | None, ...] = ()


def post_enqueue(
    port: int, body: dict[str, Any], key: str | None, timeout: float
) -> tuple[str, str | None, int | None]:
    """POST /enqueue once; return (ok / failed / unknown, job id, HTTP status or None)."""
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/enqueue", body=json.dumps(body), headers=headers)
        response = conn.getresponse()
        raw = response.read()
    except (OSError, http.client.HTTPException):  # timeout, reset: the job may exist or not
        return UNKNOWN, None, None
    finally:
        conn.close()
    if response.status in (200, 201):
        return OK, json.loads(raw)["id"], response.status
    if 400 <= response.status < 500:  # refused before anything was written
        return FAILED, None, response.status
    return UNKNOWN, None, response.status  # 503 after a lost reply: it may have run


def send_with_fault(proxy: TcpProxy, port: int, req: Request) -> None:
    """Send one request while the proxy injects `req.fault`; record the outcome."""
    key = req.tag if req.keyed else None
    timeout = CLIENT_TIMEOUT if req.fault == "client_timeout" else PATIENT_TIMEOUT
    chain = None
    if req.fault in ("drop1", "drop2"):
        chain = proxy.drop_next_reply(ENQUEUE_SHA, 1 if req.fault == "drop1" else 2)
    elif req.fault == "client_timeout":
        proxy.set_latency(LATENCY)
    elif req.fault == "paused":
        proxy.pause()
    try:
        outcome, job_id, status = post_enqueue(port, req.body, key, timeout)
    finally:
        if req.fault == "client_timeout":
            proxy.set_latency(0)
        elif req.fault == "paused":
            proxy.reset_all()  # what the proxy held never reaches Redis
            proxy.resume()
    if chain is not None and not chain.is_set():
        pytest.fail(f"{req.fault}: the gateway sent fewer enqueue calls than replies to lose")
    req.outcome = req.first_outcome = outcome
    req.job_id, req.statuses = job_id, (status,)


def retry_carefully(port: int, req: Request) -> None:
    """Resend an unknown request with the same body and Idempotency-Key until it is answered."""
    for _ in range(CAREFUL_TRIES):
        outcome, job_id, status = post_enqueue(port, req.body, req.tag, PATIENT_TIMEOUT)
        req.statuses += (status,)
        if outcome != UNKNOWN:
            req.outcome, req.job_id = outcome, job_id
            return
    pytest.fail(f"still unknown after {CAREFUL_TRIES} careful retries: {req}")


def jobs_by_tag(client: redis.Redis) -> dict[str, list[str]]:
    """Return every job in Redis grouped by the tag in its payload (read from raw hashes)."""
    ids = [k.decode()[len(KEYS.job_prefix) :] for k in client.scan_iter(KEYS.job_prefix + "*")]
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hget(KEYS.job(job_id), "payload")
    found: dict[str, list[str]] = defaultdict(list)
    for job_id, payload in zip(ids, pipe.execute(), strict=True):
        found[json.loads(payload).get("tag", "")].append(job_id)
    return found


def plan_requests(journal: Path, careful: bool) -> list[Request]:
    """Return the requests of one run: every fault with and without a key.

    A careful client cannot safely resend an unkeyed request whose outcome is unknown, so the
    careful run sends unkeyed requests only with the faults the gateway absorbs.
    """
    unkeyed = ("none", "drop1") * 3 if careful else PLAN * 2
    requests = []
    for keyed, faults in ((True, PLAN * (3 if careful else 2)), (False, unkeyed)):
        for fault in faults:
            tag = str(uuid.uuid4())
            payload = {"file": str(journal), "tag": tag}
            body: dict[str, Any] = {"type": "journaled", "payload": payload}
            if fault == "invalid":
                body["priority"] = "high"
            requests.append(Request(tag, keyed, fault, body))
    return requests


@pytest.mark.parametrize("careful", [True, False], ids=["careful_retry", "no_retry"])
def test_lost_enqueue_replies_through_gateway(
    careful: bool,
    start_workerd: Callable[..., Workerd],  # noqa: F811
    r: redis.Redis,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """Scenario 9: replies to the gateway's enqueue are lost; keyed retries make one job each."""
    journal = tmp_path / "journal.jsonl"
    began = time.monotonic()
    workerd = start_workerd(**FAULT_ENV)  # straight to Redis: only the gateway is faulted
    requests = plan_requests(journal, careful)
    with TcpProxy(redis_server.host, redis_server.port) as proxy:
        redis_url = f"redis://{proxy.host}:{proxy.port}/0"
        with run_gunicorn(redis_url, tmp_path) as gateway:
            for req in requests:
                send_with_fault(proxy, gateway.port, req)
            if careful:
                for req in requests:
                    if req.outcome == UNKNOWN:
                        retry_carefully(gateway.port, req)
        # gunicorn has stopped (gracefully): no request is still in flight.
    found = jobs_by_tag(r)
    all_ids = [job_id for ids in found.values() for job_id in ids]
    wait_settled(r, all_ids, timeout=20.0, workerd=workerd)
    records = [EnqueueRecord(req.job_id or req.tag, req.outcome) for req in requests]
    report = check(records, read_journal(journal), r)

    by_tag = {req.tag: req for req in requests}
    tags_of_unexpected = {
        job_id: tag for tag, ids in found.items() for job_id in ids if job_id in report.unexpected
    }
    explained = [j for j, tag in tags_of_unexpected.items() if by_tag[tag].outcome == UNKNOWN]
    outcomes = Counter(f"{req.fault}:{req.first_outcome}" for req in requests)
    unknown = [req for req in requests if req.first_outcome == UNKNOWN]
    figures = {
        **report.summary(),
        "jobs": len(all_ids),
        "requests": len(requests),
        "keyed": sum(req.keyed for req in requests),
        "first_outcomes": dict(sorted(outcomes.items())),
        "unknown": len(unknown),
        "unknown_applied": dict(
            sorted(Counter(f"{req.fault}:{bool(found.get(req.tag))}" for req in unknown).items())
        ),
        "careful_retries": sum(len(req.statuses) - 1 for req in requests),
        "retry_found_existing": sum(1 for req in requests if req.statuses[1:].count(200)),
        "retry_created": sum(1 for req in requests if req.statuses[1:].count(201)),
        "jobs_per_tag_max": max((len(ids) for ids in found.values()), default=0),
        "unexpected_explained": len(explained),
        "duration_s": round(time.monotonic() - began, 1),
    }
    print_figures(f"lost_enqueue_replies_{'careful_retry' if careful else 'no_retry'}", figures)

    assert all(req.first_outcome == OK for req in requests if req.fault == "drop1"), figures
    assert unknown, "no fault made an outcome unknown"
    for req in requests:
        jobs = found.get(req.tag, [])
        if req.outcome == OK:
            assert jobs == [req.job_id], (req, jobs)
        elif req.outcome == FAILED:
            assert jobs == [], (req, jobs)
        else:  # unknown, never resent: the job was made once or not at all
            assert not careful and len(jobs) <= 1, (req, jobs)
    assert report.lost == [], report.lost
    assert report.duplicates == 0, figures
    assert sorted(explained) == report.unexpected, (report.unexpected, tags_of_unexpected)
    if careful:
        assert report.unexpected == [], report.unexpected
    assert report.completed_unexecuted == []
    assert report.violations == [], report.violations
    assert report.event_mismatches == [], report.event_mismatches[:5]


# -- scenario 9 (ii): lost replies on fail ---------------------------------------------------


def attempts_by_job(records: list[dict[str, Any]]) -> tuple[dict[str, set[int]], list[Any]]:
    """Return the attempts each job's records name, and the records naming one again."""
    found: dict[str, set[int]] = defaultdict(set)
    again = []
    for rec in records:
        attempt = int(rec["attempt"])
        if attempt in found[rec["job_id"]]:
            again.append(rec)
        found[rec["job_id"]].add(attempt)
    return found, again


FAIL_SHA = script_sha("fail")


def test_lost_fail_replies_count_each_attempt_once(
    start_workerd: Callable[..., Workerd],  # noqa: F811
    r: redis.Redis,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """Scenario 9: fail's reply is lost (once, or past redis-py's retries): no double count."""
    journal = tmp_path / "journal.jsonl"
    max_retries, jobs = 3, 24
    scripts = Scripts(r, KEYS)  # the test's own client goes straight to Redis
    began = time.monotonic()
    with TcpProxy(redis_server.host, redis_server.port) as proxy:
        workerd = start_workerd(
            **FAULT_ENV,
            REDIS_URL=f"redis://{proxy.host}:{proxy.port}/0",
            # Longer than any retry of a lost call (redis-py's, then the worker's backoff), so
            # each resent fail finds the job still in `retrying`, not claimed again.
            TASK_RETRY_BASE_DELAY="1s",
        )
        body = {
            "type": "journaled",
            "max_retries": max_retries,
            "payload": {"file": str(journal), "fail": True, "sleep": 0.01},
        }
        records = [enqueue_one(scripts, body) for _ in range(jobs)]
        ids = [rec.job_id for rec in records]
        # Alternate: lose one reply (redis-py's retry absorbs it), then three in a row (more
        # than redis-py's two retries: the worker's own loop resends the call).
        chains = {1: 0, 3: 0}
        for round_ in range(16):
            count = 1 if round_ % 2 == 0 else 3
            lost = proxy.drop_next_reply(FAIL_SHA, count)

            def lost_or_done(lost: threading.Event = lost) -> bool:
                return lost.is_set() or settled(r, ids)

            wait_until(lost_or_done, 15.0, f"{count} fail replies lost")
            if not lost.is_set():
                break  # every job finished first: nothing left to fail
            chains[count] += 1
        wait_settled(r, ids, timeout=30.0, workerd=workerd)
    executions = read_journal(journal)
    report = check(records, executions, r)
    pipe = r.pipeline(transaction=False)
    for job_id in ids:
        pipe.hmget(KEYS.job(job_id), "status", "attempts", "recoveries")
    state = dict(zip(ids, pipe.execute(), strict=True))
    runs: dict[str, list[int | None]] = defaultdict(list)
    for ex in executions:
        runs[ex.job_id].append(ex.attempt)
    scheduled_at, scheduled_again = attempts_by_job(workerd.events("job_retry_scheduled"))
    stale_at, stale_again = attempts_by_job(workerd.events("job_stale_ack"))
    scheduled = Counter({job_id: len(at) for job_id, at in scheduled_at.items()})
    stale = Counter({job_id: len(at) for job_id, at in stale_at.items()})
    dead = Counter(rec["job_id"] for rec in workerd.events("job_dead"))
    # A worker still resending when the job was claimed again has lost its lease: stopped.
    stopped = Counter(rec["job_id"] for rec in workerd.events("lease_lost"))
    figures = {
        **report.summary(),
        "jobs": jobs,
        "max_retries": max_retries,
        "lost_reply_chains": {f"{n}_in_a_row": k for n, k in chains.items()},
        "replies_lost": chains[1] + 3 * chains[3],
        "retries_scheduled_logged": sum(scheduled.values()),
        "dead_logged": sum(dead.values()),
        "stale_writes_rejected": sum(stale.values()),
        "resending_workers_stopped": sum(stopped.values()),
        "attempts_equal_executions": sum(
            1 for j in ids if int(state[j][1]) == len(runs[j]) == max_retries
        ),
        "duration_s": round(time.monotonic() - began, 1),
    }
    print_figures("lost_fail_replies", figures)

    assert chains[1] >= 4 and chains[3] >= 4, chains
    assert scheduled_again == [] and stale_again == [], (scheduled_again, stale_again)
    for job_id in ids:
        status, attempts, recoveries = (v.decode() for v in state[job_id])
        # Each attempt ran once and was counted once: no fail was applied twice.
        assert (status, int(attempts), int(recoveries)) == ("dead", max_retries, 0), job_id
        assert sorted(runs[job_id]) == list(range(1, max_retries + 1)), (job_id, runs[job_id])
        # One outcome per execution. A worker whose resends outlive the retry delay (several
        # lost replies in a row) finds the job claimed again: its resend is refused as stale,
        # or the supervisor's renewal sees the new token and stops it (lease lost), or both
        # (CI saw that once: the renewal read the slot before the worker, refused, cleared
        # it). Either way the first call's retry stands and the worker logs no second one.
        # Scheduled and stale lines name their attempt: none is both, and only an attempt
        # that was not the last can be refused (the last one's resend is answered DEAD again).
        # lease_lost names no attempt: counted per job, it covers what stale does not.
        assert dead[job_id] == 1, (job_id, dead[job_id])
        seen, refused = scheduled_at[job_id], stale_at[job_id]
        unseen = set(range(1, max_retries)) - seen
        assert seen <= set(range(1, max_retries)) and refused <= unseen, (job_id, seen, refused)
        assert len(unseen - refused) <= stopped[job_id], (job_id, seen, refused, stopped)
    # Each attempt the worker saw no reply for lost at least one chain of replies.
    unseen_total = jobs * (max_retries - 1) - sum(scheduled.values())
    assert unseen_total <= sum(chains.values()), (unseen_total, chains)
    assert r.zcard(KEYS.retrying) == 0
    assert report.lost == [], report.lost
    assert report.overlapping_duplicates == 0, report.overlapping
    # Every rerun is a retry the job asked for by failing: max_retries - 1 per job, no more.
    assert report.sequential_duplicates == jobs * (max_retries - 1), figures
    assert report.unexpected == []
    assert report.violations == [], report.violations
    assert report.event_mismatches == [], report.event_mismatches[:5]


# -- scenario 12: a host clock 30 s ahead or behind ------------------------------------------

LEASE_MS = 2000  # FAULT_ENV's visibility timeout
LONG_JOB_S = 5.0  # 2.5 leases: the job lives only if its supervisor renews on Redis's clock
SCHEDULE_IN_MS = 2000
LATE_TOLERANCE_MS = 1000  # promote runs every 50 ms; the rest is margin for 2 busy cores
RETRY_BASE_MS = 1000
SKEW_TOLERANCE_S = 3.0


def _hash(client: redis.Redis, job_id: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in client.hgetall(KEYS.job(job_id)).items()}


@dataclass
class LeaseWatch:
    """Samples, on Redis's clock, how long the leases of running jobs have left."""

    client: redis.Redis
    job_ids: list[str]
    headroom_ms: list[int]

    def sample(self) -> bool:
        """Record each running job's lease headroom; return whether all of them finished."""
        pipe = self.client.pipeline(transaction=True)  # one moment for TIME and the scores
        pipe.time()
        for job_id in self.job_ids:
            pipe.zscore(KEYS.processing, job_id)
        (seconds, micros), *scores = pipe.execute()
        now = seconds * 1000 + micros // 1000
        self.headroom_ms += [int(s) - now for s in scores if s is not None]
        return settled(self.client, self.job_ids)


@pytest.mark.parametrize("offset", ["+30s", "-30s"])
def test_skewed_host_clock_moves_no_lease_or_schedule(
    offset: str,
    start_workerd: Callable[..., Workerd],  # noqa: F811
    r: redis.Redis,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """Scenario 12: workerd and gateway on a clock `offset` off: leases and schedules hold."""
    skew_env = faketime_env(offset)
    expected_skew = float(offset.rstrip("s"))
    probe_skew = observed_offset(skew_env)
    assert abs(probe_skew - expected_skew) < SKEW_TOLERANCE_S, probe_skew
    journal, failing_journal = tmp_path / "journal.jsonl", tmp_path / "failing.jsonl"
    began = time.monotonic()
    # Four workers: the two long jobs leave two free for the scheduled ones.
    env = {**FAULT_ENV, **skew_env, "WORKER_COUNT": "4"}
    workerd = start_workerd(**env, TASK_RETRY_BASE_DELAY=f"{RETRY_BASE_MS}ms")
    # DEBUG: the gateway's job_enqueued line (DEBUG since bench/PER_JOB_COST.md) is its clock's
    # witness below.
    with run_gunicorn(redis_server.url, tmp_path, **skew_env, LOG_LEVEL="DEBUG") as gateway:

        def enqueue(body: dict[str, Any]) -> tuple[str, int, int]:
            """Enqueue through the skewed gateway; return (id, Redis time before, after)."""
            before = redis_now_ms(r)
            outcome, job_id, status = post_enqueue(gateway.port, body, None, PATIENT_TIMEOUT)
            assert outcome == OK and job_id, (outcome, status)
            return job_id, before, redis_now_ms(r)

        long_ids = [
            enqueue({"type": "journaled", "payload": {"file": str(journal), "sleep": LONG_JOB_S}})
            for _ in range(2)
        ]
        # A client with a correct clock asks for "2 s from now" on the engine's clock.
        due = redis_now_ms(r) + SCHEDULE_IN_MS
        scheduled_ids = [
            enqueue(
                {
                    "type": "journaled",
                    "scheduled_at": format_ms(due + 100 * i),
                    "payload": {"file": str(journal)},
                }
            )
            for i in range(8)
        ]
        failing_ids = [
            enqueue(
                {
                    "type": "journaled",
                    "max_retries": 2,
                    "payload": {"file": str(failing_journal), "fail": True},
                }
            )
            for _ in range(3)
        ]
        enqueued = long_ids + scheduled_ids + failing_ids
        watch = LeaseWatch(r, [job_id for job_id, _, _ in long_ids], [])
        wait_until(watch.sample, LONG_JOB_S + 15.0, "the long jobs to finish", interval=0.05)
        all_ids = [job_id for job_id, _, _ in enqueued]
        wait_settled(r, all_ids, timeout=20.0, workerd=workerd)
        gateway_logs = gateway.log_lines()

    jobs = {job_id: _hash(r, job_id) for job_id in all_ids}
    # created_at comes from Redis TIME, between our readings just before and after the request.
    created_off = [
        max(before - int(jobs[j]["created_at"]), int(jobs[j]["created_at"]) - after, 0)
        for j, before, after in enqueued
    ]
    promote_late = [
        int(jobs[j]["eligible_at"]) - int(jobs[j]["scheduled_at"]) for j, _, _ in scheduled_ids
    ]
    start_late = [
        int(jobs[j]["started_at"]) - int(jobs[j]["scheduled_at"]) for j, _, _ in scheduled_ids
    ]
    retries = workerd.events("job_retry_scheduled")
    # The log line writes the time in RFC 3339 (milliseconds), as the job's JSON does.
    retry_at = [(rec["job_id"], parse_rfc3339_ms(rec["next_retry_at"])) for rec in retries]
    retry_delay = [at - int(jobs[job_id]["created_at"]) for job_id, at in retry_at]
    # The retry's claim is the job's last start (max_retries 2: it then failed for good).
    retry_late = [int(jobs[job_id]["started_at"]) - at for job_id, at in retry_at]
    # Proof that the processes really ran on the skewed clock: their own timestamps against
    # Redis's record of the same moment.
    executions = read_journal(journal)
    worker_skew = [ex.start - int(jobs[ex.job_id]["started_at"]) / 1000 for ex in executions]
    gateway_skew = [
        log_time(rec) - int(jobs[rec["job_id"]]["created_at"]) / 1000
        for rec in gateway_logs
        if rec.get("event") == "job_enqueued" and rec.get("job_id") in jobs
    ]
    records = [EnqueueRecord(j, OK) for j, _, _ in long_ids + scheduled_ids]
    report = check(records, executions, r)
    failing_runs = Counter(ex.job_id for ex in read_journal(failing_journal))
    recovered = workerd.events("job_recovered")
    lease_lost = workerd.events("lease_lost")
    figures = {
        **report.summary(),
        "jobs": len(all_ids),
        "host_clock_offset": offset,
        "observed_skew_s": {
            "probe": round(probe_skew, 2),
            "workerd_p50": round(percentile(worker_skew, 0.5) or 0.0, 2),
            "gateway_p50": round(percentile(gateway_skew, 0.5) or 0.0, 2),
        },
        "created_at_outside_request_ms_max": max(created_off),
        "lease_headroom_ms": {
            "min": min(watch.headroom_ms),
            "max": max(watch.headroom_ms),
            "samples": len(watch.headroom_ms),
        },
        "recovered": len(recovered),
        "lease_lost": len(lease_lost),
        "scheduled_promote_late_ms": {
            "min": min(promote_late),
            "p50": percentile(promote_late, 0.5),
            "max": max(promote_late),
        },
        "scheduled_start_late_ms_max": max(start_late),
        "retry_delay_ms": sorted(retry_delay),
        "retry_start_late_ms_max": max(retry_late, default=None),
        "duration_s": round(time.monotonic() - began, 1),
    }
    print_figures(f"clock_skew_{offset}", figures)

    # The skew was real in both kinds of process.
    assert abs(percentile(worker_skew, 0.5) - expected_skew) < SKEW_TOLERANCE_S, worker_skew
    assert gateway_skew, "the gateway logged no job_enqueued"
    assert abs(percentile(gateway_skew, 0.5) - expected_skew) < SKEW_TOLERANCE_S, gateway_skew
    # Timestamps the gateway writes are Redis's.
    assert max(created_off) == 0, created_off
    # Leases: renewed on Redis's clock, never shorter than needed nor 30 s too long.
    assert watch.headroom_ms, "no lease was ever seen"
    assert min(watch.headroom_ms) > 0 and max(watch.headroom_ms) <= LEASE_MS, watch.headroom_ms
    assert recovered == [] and lease_lost == [], (recovered, lease_lost)
    for job_id, _, _ in long_ids:
        assert jobs[job_id]["recoveries"] == "0" and jobs[job_id]["token"] == "1", jobs[job_id]
    # Schedules: never early, late by at most the tolerance.
    assert min(promote_late) >= 0 and max(promote_late) <= LATE_TOLERANCE_MS, promote_late
    assert min(start_late) >= 0 and max(start_late) <= 2 * LATE_TOLERANCE_MS, start_late
    # Retries: due base delay after the failure (Redis time), started on time.
    assert len(retries) == len(failing_ids), retries
    for delay in retry_delay:
        assert RETRY_BASE_MS <= delay <= RETRY_BASE_MS + LATE_TOLERANCE_MS, retry_delay
    assert min(retry_late) >= 0 and max(retry_late) <= 2 * LATE_TOLERANCE_MS, retry_late
    assert all(failing_runs[j] == 2 for j, _, _ in failing_ids), failing_runs
    assert all(jobs[j]["status"] == "dead" for j, _, _ in failing_ids)
    assert report.lost == [], report.lost
    assert report.duplicates == 0, figures
    assert report.unexpected == [] and report.completed_unexecuted == []
    assert report.statuses == {"completed": len(records)}, report.statuses
    assert report.violations == [], report.violations
    assert report.event_mismatches == [], report.event_mismatches[:5]
