"""Unit tests of the checker: hand-made journals and a seeded private Redis."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import redis

from shared.engine.engine_types import Policy
from shared.engine.keys import Keys
from shared.engine.scripts import Scripts
from shared.model.jobs import validate_enqueue
from tests.faults.checker import (
    FAILED,
    OK,
    UNKNOWN,
    EnqueueRecord,
    Execution,
    check,
    compare_job_events,
    event_mismatches,
    invariant_violations,
    read_journal,
)

KEYS = Keys()


def enqueue(scripts: Scripts) -> str:
    job_id = str(uuid.uuid4())
    assert scripts.enqueue(validate_enqueue({"type": "journaled"}), job_id).created
    return job_id


def complete(scripts: Scripts, job_id: str) -> None:
    job = scripts.claim("w1")
    assert job is not None and job.id == job_id
    scripts.complete(job.id, job.token, "{}")


def test_clean_run_has_nothing_to_report(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    a, b = enqueue(scripts), enqueue(scripts)
    complete(scripts, a)
    complete(scripts, b)
    records = [EnqueueRecord(a, OK), EnqueueRecord(b, OK)]
    runs = [Execution(a, 1.0, 2.0), Execution(b, 2.0, 3.0)]
    report = check(records, runs, r)
    assert report.summary()["lost"] == 0
    assert report.lost == [] and report.duplicates == 0 and report.unexpected == []
    assert report.violations == [], report.violations
    assert report.statuses == {"completed": 2}
    assert report.event_mismatches == [], report.event_mismatches
    assert report.events_checked == 2 and report.summary()["event_mismatches"] == 0


def test_acknowledged_job_never_finished_is_lost(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    done, stuck = enqueue(scripts), enqueue(scripts)
    complete(scripts, done)
    records = [EnqueueRecord(done, OK), EnqueueRecord(stuck, OK)]
    report = check(records, [Execution(done, 1.0, 2.0)], r)
    assert report.lost == [stuck]
    assert report.violations == []  # a pending job is a consistent state, just not finished


def test_acknowledged_job_whose_hash_vanished_is_lost(r: redis.Redis) -> None:
    gone = str(uuid.uuid4())
    report = check([EnqueueRecord(gone, OK)], [], r)
    assert report.lost == [gone]
    assert report.statuses == {"missing": 1}


def test_overlapping_and_sequential_duplicates_are_told_apart(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    twice, thrice = enqueue(scripts), enqueue(scripts)
    complete(scripts, twice)
    complete(scripts, thrice)
    records = [EnqueueRecord(twice, OK), EnqueueRecord(thrice, OK)]
    runs = [
        Execution(twice, 1.0, 3.0),
        Execution(twice, 2.0, 4.0),  # starts before the first ended: overlapping
        Execution(thrice, 1.0, 2.0),
        Execution(thrice, 5.0, 6.0),  # after: sequential
        Execution(thrice, 7.0, 8.0),  # sequential again
    ]
    report = check(records, runs, r)
    assert report.overlapping == [twice]
    assert sorted(report.sequential) == [thrice, thrice]
    assert report.duplicates == 3
    assert report.lost == []


def test_overlap_is_found_against_any_earlier_execution(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    job = enqueue(scripts)
    complete(scripts, job)
    # The third run starts after the second ended but before the long first one did.
    runs = [Execution(job, 0.0, 10.0), Execution(job, 1.0, 2.0), Execution(job, 3.0, 4.0)]
    report = check([EnqueueRecord(job, OK)], runs, r)
    assert report.overlapping_duplicates == 2
    assert report.sequential_duplicates == 0


def test_execution_never_acknowledged_is_unexpected(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    acked, unknown = enqueue(scripts), enqueue(scripts)
    complete(scripts, acked)
    complete(scripts, unknown)
    stranger = str(uuid.uuid4())
    records = [EnqueueRecord(acked, OK), EnqueueRecord(unknown, UNKNOWN)]
    runs = [Execution(acked, 1, 2), Execution(unknown, 1, 2), Execution(stranger, 1, 2)]
    report = check(records, runs, r)
    assert report.unexpected == sorted([unknown, stranger])
    assert report.acknowledged == 1


def test_failed_enqueue_is_not_counted_as_acknowledged(r: redis.Redis) -> None:
    report = check([EnqueueRecord(str(uuid.uuid4()), FAILED)], [], r)
    assert report.acknowledged == 0 and report.lost == []


def test_completed_without_side_effect_is_reported(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    job = enqueue(scripts)
    complete(scripts, job)
    report = check([EnqueueRecord(job, OK)], [], r)
    assert report.completed_unexecuted == [job]
    assert check([EnqueueRecord(job, OK)], [], r, journaled=[]).completed_unexecuted == []


def test_job_in_two_indexes_is_flagged(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    job = enqueue(scripts)
    complete(scripts, job)
    r.zadd(KEYS.dead, {job: 1})
    problems = invariant_violations(r)
    assert any(job in p and "indexes" in p for p in problems), problems


def test_status_disagreeing_with_its_index_is_flagged(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    job = enqueue(scripts)
    r.hset(KEYS.job(job), "status", "retrying")
    problems = invariant_violations(r)
    assert any(job in p and "'retrying'" in p for p in problems), problems


def test_processing_job_without_lease_is_flagged(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    job = enqueue(scripts)
    claimed = scripts.claim("w1")
    assert claimed is not None and claimed.id == job
    assert invariant_violations(r) == []
    r.zrem(KEYS.processing, job)
    problems = invariant_violations(r)
    assert f"processing job {job} has no lease" in problems, problems


def test_processing_job_without_token_is_flagged(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    job = enqueue(scripts)
    assert scripts.claim("w1") is not None
    r.hdel(KEYS.job(job), "token")
    assert f"processing job {job} has no token" in invariant_violations(r)


def test_job_hash_without_index_entry_is_flagged(r: redis.Redis) -> None:
    orphan = str(uuid.uuid4())
    r.hset(KEYS.job(orphan), mapping={"status": "pending", "id": orphan})
    problems = invariant_violations(r)
    assert any(orphan in p and "[]" in p for p in problems), problems


def test_live_index_entry_without_job_hash_is_flagged(r: redis.Redis) -> None:
    ghost = str(uuid.uuid4())
    r.zadd(KEYS.processing, {ghost: 1})
    problems = invariant_violations(r)
    assert f"processing index holds {ghost}, which has no job hash" in problems, problems


def test_key_outside_prefix_and_key_without_ttl_are_flagged(r: redis.Redis) -> None:
    r.set("stray", "1")
    r.set(KEYS.idempotency("k"), "1")  # non-live, yet no TTL
    problems = invariant_violations(r)
    assert "key outside the prefix: 'stray'" in problems, problems
    assert f"key without a TTL: {KEYS.idempotency('k')!r}" in problems, problems


def test_finished_job_without_ttl_is_flagged(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    job = enqueue(scripts)
    scripts.cancel(job)
    assert invariant_violations(r) == []
    r.persist(KEYS.job(job))
    assert f"canceled job {job} has no TTL" in invariant_violations(r)


def test_completed_job_outside_its_capped_index_is_flagged(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    job = enqueue(scripts)
    complete(scripts, job)
    assert invariant_violations(r) == []  # no TTL: the completed index's cap bounds it
    r.zrem(KEYS.completed, job)
    assert f"job {job} has status 'completed' but is in indexes []" in invariant_violations(r)


def test_read_journal_skips_a_torn_last_line(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    line = {"id": "a", "start": 1.0, "end": 2.0, "pid": 7, "attempt": 1, "outcome": "ok"}
    path.write_text(json.dumps(line) + "\n" + '{"id": "b", "sta')
    assert read_journal(path) == [Execution("a", 1.0, 2.0, pid=7, attempt=1)]
    assert read_journal(tmp_path / "missing.jsonl") == []


# --- the events check: every job's stream entries against its own history ------------------


# One Redis: every queue's events are in the one stream, each naming its queue.
STREAM = KEYS.fleet_events


def add_event(r: redis.Redis, event: str, job_id: str) -> None:
    """Append an event by hand, as no script would: the fault the check must catch."""
    r.xadd(STREAM, {"q": KEYS.queue, "e": event, "j": job_id, "t": "journaled"})


def events_of(r: redis.Redis, job_id: str) -> list[bytes]:
    return [fields[b"e"] for _, fields in r.xrange(STREAM) if fields.get(b"j") == job_id.encode()]


def test_events_of_a_run_with_every_kind_of_transition_match(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    done, dead, purged, canceled = (enqueue(scripts) for _ in range(4))  # claimed in order
    complete(scripts, done)
    for job_id in (dead, purged):
        job = scripts.claim("w1")
        assert job is not None and job.id == job_id
        scripts.fail(job.id, job.token, "Boom: no", permanent=True)
    scripts.cancel(canceled)
    scripts.purge(purged)
    found = event_mismatches(r, KEYS, [done, dead, canceled, purged, str(uuid.uuid4())])
    assert found.mismatches == [] and found.checked == 5, found
    assert found.events == 3 + 3 + 4 + 2  # done, dead, purged, canceled; none for the 5th
    assert events_of(r, done) == [b"enqueued", b"claimed", b"completed"]
    assert events_of(r, purged)[-1] == b"purged"


def test_the_events_of_running_cancels_match_their_history(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    stopped, asked, recovered = (enqueue(scripts) for _ in range(3))
    claimed = {}
    for job_id in (stopped, asked, recovered):
        job = scripts.claim("w1")
        assert job is not None and job.id == job_id
        claimed[job_id] = job.token
        scripts.cancel(job_id, by="checker")
    scripts.cancel_running(stopped, claimed[stopped], "sigterm")
    scripts.recover(now_ms=int(time.time() * 1000) + 10 * 60 * 1000)  # asked: recovered ones
    found = event_mismatches(r, KEYS, [stopped, asked, recovered])
    assert found.mismatches == [], found
    assert events_of(r, stopped) == [b"enqueued", b"claimed", b"cancel_requested", b"canceled"]
    assert invariant_violations(r, KEYS) == []
    # A request still running is explained by its last transition: processing.
    fresh = enqueue(scripts)
    scripts.claim("w2")
    scripts.cancel(fresh)
    assert event_mismatches(r, KEYS, [fresh]).mismatches == []


def test_a_repeated_call_writes_no_second_event(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    job_id = str(uuid.uuid4())
    body = validate_enqueue({"type": "journaled"})
    assert scripts.enqueue(body, job_id).created
    assert scripts.enqueue(body, job_id).job_id == job_id  # a resend after a lost reply
    complete(scripts, job_id)
    assert events_of(r, job_id) == [b"enqueued", b"claimed", b"completed"]
    assert event_mismatches(r, KEYS, [job_id]).mismatches == []


def test_a_missing_event_is_caught(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    job = enqueue(scripts)
    claimed = scripts.claim("w1")
    assert claimed is not None and claimed.id == job
    # Completed by a script that writes no event (as TASKFORGE_EVENTS=off makes it).
    Scripts(r, KEYS, Policy(events_cap=0)).complete(job, claimed.token, "{}")
    report = check([EnqueueRecord(job, OK)], [Execution(job, 1, 2)], r)
    assert report.event_mismatches == [
        f"job {job}: events missing completed×1 (history ['enqueued', 'claimed', 'completed'])"
    ]
    assert report.summary()["event_mismatches"] == 1


def test_a_doubled_event_is_caught(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    job = enqueue(scripts)
    complete(scripts, job)
    add_event(r, "completed", job)
    [problem] = check([EnqueueRecord(job, OK)], [Execution(job, 1, 2)], r).event_mismatches
    assert problem.startswith(f"job {job}: events extra completed×1"), problem


def test_an_event_for_a_transition_that_did_not_happen_is_caught(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    pending, never = enqueue(scripts), str(uuid.uuid4())
    add_event(r, "dead", pending)  # the job is still pending: it never died
    add_event(r, "enqueued", never)  # no such job (an enqueue that did not land)
    found = event_mismatches(r, KEYS, [pending, never])
    assert sorted(found.mismatches) == sorted(
        [
            f"job {pending}: events extra dead×1 (history ['enqueued'])",
            f"job {never}: no job hash, but events ['enqueued']",
        ]
    ), found.mismatches


def test_a_status_no_transition_explains_is_caught(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    job = enqueue(scripts)
    r.hset(KEYS.job(job), "status", "completed")  # as if completed without a transition
    [problem] = event_mismatches(r, KEYS, [job]).mismatches
    assert problem == f"job {job}: status 'completed' but its last transition was 'enqueued'"


def test_events_in_another_order_are_caught() -> None:
    history_events = ["enqueued", "claimed", "completed"]
    problem = compare_job_events("j", "completed", history_events, 0, history_events[::-1])
    assert problem is not None and "same events in another order" in problem


def test_a_capped_history_is_compared_by_its_tail_and_count() -> None:
    kept = ["claimed", "recovered"] * 24 + ["claimed", "completed"]
    stream = ["enqueued"] + ["claimed", "recovered"] * 30 + ["claimed", "completed"]
    dropped = len(stream) - len(kept)
    assert compare_job_events("j", "completed", kept, dropped, stream) is None
    short = compare_job_events("j", "completed", kept, dropped, stream[1:])  # enqueued lost
    assert short is not None and "history capped" in short, short
    doubled = compare_job_events("j", "completed", kept, dropped, [*stream, "completed"])
    assert doubled is not None, doubled


def test_a_trimmed_stream_is_reported_not_compared(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    job = enqueue(scripts)
    r.xtrim(STREAM, maxlen=0)
    found = event_mismatches(r, KEYS, [job])
    assert len(found.mismatches) == 1 and "was trimmed (1 added, 0 kept;" in found.mismatches[0]
    assert found.checked == 0


def test_a_capped_history_written_by_the_scripts_matches_its_events(r: redis.Redis) -> None:
    scripts = Scripts(r, KEYS)
    job = enqueue(scripts)
    for _ in range(30):  # 1 + 60 transitions: past the history's cap of 50
        claimed = scripts.claim("w1")
        assert claimed is not None and claimed.id == job
        scripts.release(job, claimed.token, drained=True)
    found = event_mismatches(r, KEYS, [job])
    assert found.mismatches == [] and found.capped == 1, found
