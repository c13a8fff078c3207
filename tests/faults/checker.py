"""Account for every job of a fault run, and check the Redis invariants from raw Redis.

Inputs: the client's enqueue records (job id and ok / failed / unknown), the journal the
``journaled`` handler wrote (one line per execution that produced its side effect), and a
Redis client. Nothing here goes through shared.engine.queries: the invariants are read key by key,
so a bug in the engine's own read path cannot hide one. The events check holds each job's
events stream entries against the job's own history (both written by the same script).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from shared.engine import history
from shared.engine.events import per_queue_streams, stream_key, stream_of
from shared.engine.keys import Keys

OK, FAILED, UNKNOWN = "ok", "failed", "unknown"
LIVE_STATES = ("pending", "scheduled", "processing", "retrying")
FINISHED_STATES = ("completed", "canceled", "dead")
STATES = LIVE_STATES + FINISHED_STATES
# An acknowledged job that reached one of these is accounted for (canceled only on request).
SETTLED = frozenset(FINISHED_STATES)


@dataclass(frozen=True)
class EnqueueRecord:
    """What the client knows about one enqueue call."""

    job_id: str
    outcome: str  # OK (acknowledged), FAILED (definite error) or UNKNOWN (timeout / reset)


@dataclass(frozen=True)
class Execution:
    """One journal line: an execution that produced its side effect."""

    job_id: str
    start: float
    end: float
    pid: int | None = None
    attempt: int | None = None
    outcome: str = OK


@dataclass
class Report:
    """The accounting of one run."""

    acknowledged: int = 0
    executions: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    # Executions beyond one per job; each is either overlapping an earlier one or sequential.
    duplicates: int = 0
    overlapping: list[str] = field(default_factory=list)  # job ids, one per overlapping run
    sequential: list[str] = field(default_factory=list)  # job ids, one per sequential rerun
    unexpected: list[str] = field(default_factory=list)  # executed, never acknowledged
    completed_unexecuted: list[str] = field(default_factory=list)  # completed, no side effect
    violations: list[str] = field(default_factory=list)  # Redis invariants broken
    # Jobs whose events (the queue's stream) disagree with their history or status.
    event_mismatches: list[str] = field(default_factory=list)
    events_checked: int = 0  # jobs whose events were compared
    events_capped: int = 0  # of those, jobs whose history was capped (checked by its tail)
    events_compared: int = 0  # stream entries of those jobs

    @property
    def overlapping_duplicates(self) -> int:
        """Return how many executions overlapped an earlier execution of the same job."""
        return len(self.overlapping)

    @property
    def sequential_duplicates(self) -> int:
        """Return how many executions re-ran a job after an earlier execution ended."""
        return len(self.sequential)

    def summary(self) -> dict[str, Any]:
        """Return the figures as a flat dict (for printing and bench/FAULTS.md)."""
        return {
            "acknowledged": self.acknowledged,
            "executions": self.executions,
            "lost": len(self.lost),
            "duplicates": self.duplicates,
            "overlapping": self.overlapping_duplicates,
            "sequential": self.sequential_duplicates,
            "unexpected": len(self.unexpected),
            "completed_unexecuted": len(self.completed_unexecuted),
            "violations": len(self.violations),
            "event_mismatches": len(self.event_mismatches),
            "events_checked": self.events_checked,
            "events_capped": self.events_capped,
            "events_compared": self.events_compared,
            "statuses": dict(sorted(self.statuses.items())),
        }


def read_journal(path: Path | str) -> list[Execution]:
    """Read the complete lines of a journal (a missing file is an empty journal)."""
    path = Path(path)
    if not path.exists():
        return []
    executions = []
    for line in path.read_text().split("\n")[:-1]:  # a torn last line is not an execution
        if not line.strip():
            continue
        rec = json.loads(line)
        executions.append(
            Execution(
                job_id=rec["id"],
                start=float(rec["start"]),
                end=float(rec["end"]),
                pid=rec.get("pid"),
                attempt=rec.get("attempt"),
                outcome=rec.get("outcome", OK),
            )
        )
    return executions


def _text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def _statuses(client: redis.Redis, keys: Keys, job_ids: Sequence[str]) -> dict[str, str | None]:
    pipe = client.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.hget(keys.job(job_id), "status")
    return {i: _text(s) for i, s in zip(job_ids, pipe.execute(), strict=True)}


def finished_or_gone(client: redis.Redis, keys: Keys, job_ids: Sequence[str]) -> bool:
    """Every job is finished or absent (lost), and nothing is left live in the queue.

    The failover scenarios poll it before checking: a job lost with the old primary is absent.
    """
    pipe = client.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.hget(keys.job(job_id), "status")
    for state in LIVE_STATES:
        pipe.zcard(keys.state_index(state))
    replies = pipe.execute()
    statuses, live = replies[: len(job_ids)], replies[len(job_ids) :]
    return all(s is None or s.decode() in SETTLED for s in statuses) and not any(live)


def account(
    records: Iterable[EnqueueRecord], executions: Iterable[Execution]
) -> tuple[list[str], list[str], list[str], dict[str, list[Execution]]]:
    """Split duplicates: return (overlapping ids, sequential ids, unexpected ids, by job)."""
    acked = {r.job_id for r in records if r.outcome == OK}
    by_job: dict[str, list[Execution]] = defaultdict(list)
    for ex in executions:
        by_job[ex.job_id].append(ex)
    overlapping, sequential = [], []
    for job_id, runs in by_job.items():
        runs.sort(key=lambda e: (e.start, e.end))
        latest_end = runs[0].end
        for run in runs[1:]:
            # Intervals are closed: a rerun that starts before an earlier one ended overlaps.
            (overlapping if run.start < latest_end else sequential).append(job_id)
            latest_end = max(latest_end, run.end)
    unexpected = sorted(j for j in by_job if j not in acked)
    return overlapping, sequential, unexpected, by_job


def check(
    records: Sequence[EnqueueRecord],
    executions: Sequence[Execution],
    client: redis.Redis,
    keys: Keys | None = None,
    *,
    journaled: Iterable[str] | None = None,
    events: bool = True,
) -> Report:
    """Account for every job and check the invariants; `journaled` = ids whose handler journals.

    By default every acknowledged job is expected to journal its execution; pass the ids that
    do (e.g. all but a poison pill) to limit the completed-without-side-effect check.
    `events=False` skips the events check (a run with TASKFORGE_EVENTS=off writes none).
    """
    keys = keys or Keys()
    report = Report(executions=len(executions))
    acked = [r.job_id for r in records if r.outcome == OK]
    report.acknowledged = len(acked)
    overlapping, sequential, unexpected, by_job = account(records, executions)
    report.overlapping, report.sequential, report.unexpected = overlapping, sequential, unexpected
    report.duplicates = len(overlapping) + len(sequential)
    statuses = _statuses(client, keys, acked)
    report.statuses = dict(Counter(s or "missing" for s in statuses.values()))
    report.lost = sorted(j for j, s in statuses.items() if s not in SETTLED)
    expect_effect = set(acked if journaled is None else journaled)
    report.completed_unexecuted = sorted(
        j
        for j, s in statuses.items()
        if s == "completed" and j in expect_effect and j not in by_job
    )
    report.violations = invariant_violations(client, keys)
    if events:
        found = event_mismatches(client, keys, [r.job_id for r in records])
        report.event_mismatches = found.mismatches
        report.events_checked, report.events_capped = found.checked, found.capped
        report.events_compared = found.events
    return report


def _scan(client: redis.Redis) -> list[str]:
    return [_text(k) for k in client.scan_iter(match="*", count=1000)]  # type: ignore[misc]


def invariant_violations(client: redis.Redis, keys: Keys | None = None) -> list[str]:
    """Return every broken invariant, read from raw Redis (an empty list when all hold).

    - no key outside the queue's prefix and the global one (shared.engine.keys);
    - each job hash is in exactly one state index, the one its status names (pending also
      in pending_since), and a live job's index entry has a job hash;
    - every processing job has a lease (a score in processing) and a non-empty token;
    - every key that is not live state (indexes, counters, live jobs) has a TTL.
    """
    keys = keys or Keys()
    problems: list[str] = []
    all_keys = _scan(client)
    ours = (keys.prefix, keys.global_prefix)
    problems += [f"key outside the prefix: {k!r}" for k in all_keys if not k.startswith(ours)]

    members: dict[str, dict[str, float]] = {}
    for state in STATES:
        raw = client.zrange(keys.state_index(state), 0, -1, withscores=True)
        ids: dict[str, float] = {}
        for member, score in raw:
            text = _text(member) or ""
            job_id = text.split(":", 1)[1] if state == "pending" else text
            ids[job_id] = score
        members[state] = ids
    # A pending job a type's limit holds is in `held`, not `pending` (docs/QUEUES.md, "Limits").
    for member in client.zrange(keys.held, 0, -1):
        members["pending"][(_text(member) or "").rsplit(":", 1)[1]] = 0.0
    since = {_text(m) for m in client.zrange(keys.pending_since, 0, -1)}
    if since != set(members["pending"]):
        problems.append(
            f"pending and pending_since disagree: {sorted(since ^ set(members['pending']))}"
        )

    fixed = {keys.state_index(s) for s in STATES}
    fixed |= {keys.pending_since, keys.seq, keys.wake, keys.workers, keys.queues, keys.limited}
    # The scheduler's due index and served set: an entry per queue (workerd/scheduler.py).
    fixed |= {keys.due, keys.served}
    # The tag map of job ids (shared/model/job_ids.py): one small set per listed queue's tag, kept
    # with the list of queues, removed with a queue.
    fixed |= {k for k in all_keys if k.startswith(keys.queue_tag(""))}
    # A pause lasts until a resume; failures per second are capped by trim (64 seconds kept),
    # and so are the throughput minutes (62 kept).
    fixed |= {keys.paused, keys.failures, keys.throughput}
    # The events streams are capped by every XADD that writes them (docs/EVENTS.md).
    fixed |= {keys.events, keys.fleet_events}
    # The limits and their live state (a slot per running job, held jobs, buckets, gates).
    fixed |= {keys.limits, keys.running, keys.held, keys.held_order, keys.buckets, keys.gates}
    problems += leaked_slots(client, keys, set(members["processing"]))
    # Periodic schedules: the published definitions, and each schedule's state (docs/SCHEDULES.md:
    # one small hash per schedule ever published, kept so a schedule resumes where it was).
    fixed |= {keys.schedules}
    fixed |= {k for k in all_keys if k.startswith(keys.schedule(""))}
    job_keys = [k for k in all_keys if k.startswith(keys.job_prefix)]
    pipe = client.pipeline(transaction=False)
    for k in job_keys:
        pipe.hmget(k, "status", "token")
        pipe.pttl(k)
    replies = pipe.execute()
    hashed: set[str] = set()
    for n, k in enumerate(job_keys):
        status, token = (_text(v) for v in replies[2 * n])
        ttl = replies[2 * n + 1]
        job_id = k[len(keys.job_prefix) :]
        hashed.add(job_id)
        where = [s for s in STATES if job_id in members[s]]
        if len(where) != 1 or where[0] != status:
            problems.append(f"job {job_id} has status {status!r} but is in indexes {where}")
        if status == "processing" and job_id not in members["processing"]:
            problems.append(f"processing job {job_id} has no lease")
        if status == "processing" and not token:
            problems.append(f"processing job {job_id} has no token")
        # Completed jobs are bounded by trim (the completed index's cap), the others expire.
        if status not in LIVE_STATES and status != "completed" and ttl == -1:
            problems.append(f"{status or 'unknown'} job {job_id} has no TTL")
    for state in LIVE_STATES:
        for job_id in members[state]:
            if job_id not in hashed:
                problems.append(f"{state} index holds {job_id}, which has no job hash")

    others = [k for k in all_keys if k.startswith(ours) and k not in fixed]
    others = [k for k in others if not k.startswith(keys.job_prefix)]
    if others:
        pipe = client.pipeline(transaction=False)
        for k in others:
            pipe.pttl(k)
        for k, ttl in zip(others, pipe.execute(), strict=True):
            if ttl == -1:
                problems.append(f"key without a TTL: {k!r}")
    return problems


def leaked_slots(client: redis.Redis, keys: Keys, processing: set[str]) -> list[str]:
    """Return a problem per slot held by a job that is not processing (a slot never given
    back), and per processing job a concurrency limit counts that holds no slot (one never
    taken)."""
    slots = {(_text(m) or "").split("|", 1)[1] for m in client.zrange(keys.running, 0, -1)}
    problems = [f"limit slot held by {j}, which is not processing" for j in slots - processing]
    raw = client.get(keys.limits)
    if raw:
        doc = json.loads(raw)
        counted = {name for name, limit in doc.get("t", {}).items() if "c" in limit}
        for job_id in sorted(processing - slots):
            job_type = _text(client.hget(keys.job(job_id), "type"))
            if "c" in doc or job_type in counted:
                problems.append(f"processing job {job_id} holds no limit slot")
    return problems


# The status a job is in right after each history event (shared/engine/history.py EVENTS): the job's
# status must be that of its last transition, or a transition changed it without a trace.
STATUS_AFTER = {
    "enqueued": "pending",
    "scheduled": "scheduled",
    "promoted": "pending",
    "claimed": "processing",
    "completed": "completed",
    "retrying": "retrying",
    "dead": "dead",
    "recovered": "pending",
    "released": "pending",
    "canceled": "canceled",
    "replayed": "pending",
    "cancel_requested": "processing",  # a running job asked to stop: it runs on until it ends
    "held": "pending",
}
STREAM_PAGE = 10_000  # XRANGE entries per call: no one reply the size of the whole stream


@dataclass
class EventCheck:
    """What the events check found: mismatches, and how many jobs it compared."""

    mismatches: list[str] = field(default_factory=list)
    checked: int = 0
    capped: int = 0  # jobs whose history was capped: only its tail and its count compared
    events: int = 0  # stream entries of the jobs compared


def read_job_events(
    client: redis.Redis, stream: str, queue: str | None = None
) -> dict[str, list[str]]:
    """Return each job's event names in a stream, in stream order (host and queue events out;
    with `queue`, another queue's too)."""
    by_job: dict[str, list[str]] = defaultdict(list)
    start = "-"
    while True:
        page = client.xrange(stream, min=start, max="+", count=STREAM_PAGE)
        for _, raw in page:
            entry = {_text(k): _text(v) for k, v in raw.items()}  # either kind of client
            job_id = entry.get("j")
            if job_id is not None and (queue is None or entry.get("q", queue) == queue):
                by_job[job_id].append(entry.get("e") or "")
        if len(page) < STREAM_PAGE:
            return by_job
        start = "(" + _text(page[-1][0])  # type: ignore[operator]


def _per_queue_streams(client: redis.Redis) -> bool:
    """Tell whether `client` reads a Cluster, where each queue writes its own stream: a cluster
    client, or a plain one connected to one master (as the failover scenario checks each queue
    on the master holding it)."""
    if per_queue_streams(client):
        return True
    return bool(client.info("cluster").get("cluster_enabled"))


def stream_trimmed(client: redis.Redis, stream: str) -> str | None:
    """Return why the stream cannot be compared (the cap dropped entries), or None."""
    if not client.exists(stream):
        return None
    info = client.xinfo_stream(stream)
    added, length = info.get("entries-added"), info["length"]
    if added is None:
        return f"stream {stream!r}: this Redis does not report entries-added (Redis < 7.0)"
    if added != length:
        return (
            f"stream {stream!r} was trimmed ({added} added, {length} kept; or entries deleted):"
            " events unchecked"
        )
    return None


def _differ(history_events: list[str], stream_events: list[str]) -> str:
    """Say how two event lists differ: which events one has more of, or only the order."""
    want, got = Counter(history_events), Counter(stream_events)
    missing = ", ".join(f"{e}×{n}" for e, n in sorted((want - got).items()))
    extra = ", ".join(f"{e}×{n}" for e, n in sorted((got - want).items()))
    parts = [f"missing {missing}" if missing else "", f"extra {extra}" if extra else ""]
    return "; ".join(p for p in parts if p) or "same events in another order"


def compare_job_events(
    job_id: str,
    status: str | None,
    entries: list[str],
    dropped: int,
    stream_events: list[str],
) -> str | None:
    """Return what is wrong with one job's events, or None when they match its history.

    entries: the event names its history keeps, oldest first; dropped: how many older ones the
    history's cap dropped (then only the stream's tail and its count can be compared); status:
    None when the job has no hash (then only a purge, its last event, explains events).
    """
    if status is None:
        if not stream_events:
            return None
        if stream_events.count("purged") == 1 and stream_events[-2:] == ["dead", "purged"]:
            return None  # purge deletes the dead job's hash; its events stay
        return f"job {job_id}: no job hash, but events {stream_events}"
    if not entries:
        if stream_events:  # a hash without history was not written by the scripts
            return f"job {job_id}: no history, but events {stream_events}"
        return None
    expected_status = STATUS_AFTER.get(entries[-1])
    if expected_status != status:
        return f"job {job_id}: status {status!r} but its last transition was {entries[-1]!r}"
    tail = stream_events[len(stream_events) - len(entries) :] if dropped else stream_events
    if tail != entries or (dropped and len(stream_events) != dropped + len(entries)):
        if dropped:
            return (
                f"job {job_id}: {dropped + len(entries)} transitions (history capped) but "
                f"{len(stream_events)} events; {_differ(entries, tail)} in the kept tail"
            )
        return f"job {job_id}: events {_differ(entries, stream_events)} (history {entries})"
    return None


def event_mismatches(
    client: redis.Redis, keys: Keys | None = None, job_ids: Iterable[str] = ()
) -> EventCheck:
    """Hold every job's entries in its queue's events stream against its history and status.

    The same script writes a transition, its history entry and its event, and a repeated call
    (a lost reply) writes none of them again, so for each job the stream's events are exactly
    its history's, in order: one enqueued (or scheduled), one completed for a completed job and
    none for another, one claimed per claim, one dead per death. Checked: every job hash of the
    queue, every id in `job_ids` (an enqueue that may not have landed: no hash, no events), and
    every job the stream names. Meaningless once the cap trimmed the stream, so that is
    reported instead.
    """
    keys = keys or Keys()
    result = EventCheck()
    # One Redis: the one stream of every queue (entries name theirs); a cluster: the queue's.
    key = stream_key(keys, stream_of(keys.queue, _per_queue_streams(client)))
    trimmed = stream_trimmed(client, key)
    if trimmed:
        result.mismatches.append(trimmed)
        return result
    stream = read_job_events(client, key, keys.queue)
    hashed = [k[len(keys.job_prefix) :] for k in _scan(client) if k.startswith(keys.job_prefix)]
    ids = sorted(set(hashed) | set(job_ids) | set(stream))
    pipe = client.pipeline(transaction=False)
    for job_id in ids:
        pipe.hmget(keys.job(job_id), "status", "history", "created_at")
    for job_id, (status, value, created) in zip(ids, pipe.execute(), strict=True):
        kept = history.parse(value, int(created or 0))
        result.checked += 1
        result.capped += kept.dropped > 0
        result.events += len(stream.get(job_id, []))
        problem = compare_job_events(
            job_id,
            _text(status),
            [e.event for e in kept.entries],
            kept.dropped,
            stream.get(job_id, []),
        )
        if problem:
            result.mismatches.append(problem)
    return result
