"""Upgrade from layout v1: move every job under ``{taskforge}:v1:`` into v2's ``default`` queue.

``python -m shared.upgrade [--dry-run]`` runs it once (docs/QUEUES.md, "Upgrading from v1");
workerd's scheduler runs the same moves while v1 holds jobs (workerd/v1_drain.py), so jobs an
old gateway still enqueues under v1 during a rolling upgrade are not stranded.

A job crosses in three scripts, since v1's keys and the default queue's live in two slots.
``upgrade_detach`` (v1 slot) takes it out of its v1 index and renames its hash into a staging
area; ``upgrade_copy`` (v2 slot) writes it into v2 as it was: fields (token included), state,
index score, TTL, and a pending job's sequence number, so the line keeps its order;
``upgrade_drop`` (v1 slot) deletes the staged original. A run that stops anywhere leaves the
job staged or copied, never nowhere, and every run first finishes what is staged (a copy whose
v2 hash exists writes nothing). Staged, a job is out of reach of old and new processes alike:
no v1 script finds it, no v2 worker sees it. (Copying first and deleting after, a pending job
would be claimable in both layouts between the two steps.)

Processing jobs move once their lease has expired, as they are: v2's recovery then requeues
them, a recovery counted, exactly as v1's would have. A live lease is a v1 worker running the
job: the job stays until that worker finishes it (it then moves as completed, retrying or dead)
or its lease runs out.

Idempotency keys move to v2's global key once their job lives in v2. v2's digest covers the
queue and v1's did not, but both digest the request, and the job's hash keeps every field of
it: the v2 digest is computed again from the job, after checking that the v1 digest computed
the same way is the stored one. A retry of a v1 request after the upgrade gets its first job.
A key whose job is gone is forgotten, as v1 forgot it. A key whose digest cannot be rebuilt
(never seen) keeps a digest no request has, so a retry is refused (409) rather than run twice.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from shared.config import load_or_exit
from shared.engine_types import Code, Policy
from shared.jobs import EnqueueRequest
from shared.keys import Keys, V1Keys
from shared.log import error_text
from shared.lua_source import assemble
from shared.queues import DEFAULT_QUEUE
from shared.redis_conn import connect, is_cluster

SCRIPT_NAMES = ("upgrade_detach", "upgrade_copy", "upgrade_drop", "upgrade_idem")
# The v1 indexes, in the order upgrade_detach walks them (claimable jobs first).
V1_STATES = ("pending", "scheduled", "retrying", "processing", "dead", "canceled", "completed")
UNINDEXED = "unindexed"  # a job hash no v1 index named (only a key scan finds one)
BATCH = 500  # jobs taken out of v1 per upgrade_detach call
# Staged jobs read at once, and the fields one upgrade_copy call carries (about): payloads
# reach 1 MiB, so a batch's jobs are read and copied a few at a time.
READ_CHUNK = 64
COPY_BYTES = 4 * 1024 * 1024
SCAN_COUNT = 1_000
WAKE_CAP = Policy().wake_cap
# The request fields a job's hash keeps, from which its idempotency digest is rebuilt.
REQUEST_FIELDS = (b"type", b"payload", b"priority", b"max_retries", b"scheduled_at", b"timeout")


@dataclass
class Moved:
    """What a run or a pass did: counts only, never a job's data."""

    jobs: Counter[str] = field(default_factory=Counter)  # copied into v2, by v1 state
    present: int = 0  # staged jobs whose v2 copy an interrupted run had written already
    dangling: int = 0  # v1 index entries whose hash was gone: removed
    expired: int = 0  # staged hashes whose TTL ran out while staged: gone, as in v1
    held: int = 0  # processing jobs under a live lease, left in v1 for now
    keys: Counter[str] = field(default_factory=Counter)  # idempotency keys, by outcome
    progressed: bool = False  # a job was taken out of v1 or finished crossing

    @property
    def total(self) -> int:
        """Return how many jobs were copied into v2."""
        return sum(self.jobs.values())

    def add(self, other: Moved) -> None:
        """Add another pass's counts (the held count is the later pass's)."""
        self.jobs.update(other.jobs)
        self.keys.update(other.keys)
        self.present += other.present
        self.dangling += other.dangling
        self.expired += other.expired
        self.held = other.held
        self.progressed = self.progressed or other.progressed

    def fields(self) -> dict[str, int]:
        """Return the non-zero counts as flat log fields."""
        counts = {f"moved_{state}": n for state, n in self.jobs.items()}
        counts |= {f"keys_{outcome}": n for outcome, n in self.keys.items()}
        counts |= {
            "moved": self.total,
            "already_copied": self.present,
            "dangling": self.dangling,
            "expired": self.expired,
            "held": self.held,
        }
        return {name: n for name, n in counts.items() if n}


@dataclass(frozen=True)
class Census:
    """What v1 holds, for ``--dry-run``: jobs per index, and what a key scan finds."""

    by_state: dict[str, int]  # processing: only those whose lease has expired
    held: int
    staged: int
    job_hashes: int
    idempotency_keys: int


@dataclass(frozen=True)
class _Staged:
    """A staged job as read from the v1 slot, ready for upgrade_copy."""

    job_id: str
    state: str
    args: list[Any]
    size: int


class Upgrade:
    """Moves v1's jobs and idempotency keys into v2; every step re-checks in Redis."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys | None = None,
        v1: V1Keys | None = None,
        *,
        wake_cap: int = WAKE_CAP,
    ) -> None:
        self.redis = client
        self.v2 = (keys or Keys()).for_queue(DEFAULT_QUEUE)
        self.v1 = v1 or V1Keys(f"{{{self.v2.namespace}}}:v1:")
        if self.v1.hash_tag != self.v2.namespace:
            # upgrade_idem reads a v1 key and writes a v2 global key: one slot only if so.
            raise ValueError(
                f"the v1 prefix {self.v1.prefix} has the hash tag {{{self.v1.hash_tag}}}: "
                f"set TASKFORGE_NAMESPACE={self.v1.hash_tag}"
            )
        self.wake_cap = wake_cap
        self.scan_count = SCAN_COUNT
        self._scripts = {n: client.register_script(assemble(n)) for n in SCRIPT_NAMES}

    def _call(self, name: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        script = self._scripts[name]
        try:
            return script(keys=keys, args=args)
        except redis.exceptions.NoScriptError:
            # The script cache emptied again between redis-py's reload and its retry (SCRIPT
            # FLUSH, restart, failover): the script did not run. Once more.
            return script(keys=keys, args=args)

    @property
    def _indexes(self) -> list[str]:
        v1 = self.v1
        return [
            v1.state_index("pending"),
            v1.pending_since,
            *(v1.state_index(state) for state in V1_STATES[1:]),
        ]

    # --- jobs ------------------------------------------------------------------------------

    def v1_holds_jobs(self) -> bool:
        """Return whether any v1 index, or the staging area, exists (one EXISTS)."""
        return bool(self.redis.exists(*self._indexes, self.v1.moving))

    def move_jobs(
        self,
        limit: int = BATCH,
        *,
        unindexed: Sequence[str] = (),
        now_ms: int | None = None,
    ) -> Moved:
        """Take up to `limit` jobs out of v1, then copy into v2 every job staged.

        `unindexed`: ids of v1 job hashes a key scan found, taken only if no index names them.
        """
        v1 = self.v1
        taken, dangling, held = self._call(
            "upgrade_detach",
            [v1.moving, *self._indexes],
            [v1.job_prefix, v1.staged_prefix, limit, "" if now_ms is None else now_ms, *unindexed],
        )
        moved = Moved(dangling=int(dangling), held=int(held), progressed=taken > 0)
        staged = {k.decode(): v.decode() for k, v in self.redis.hgetall(v1.moving).items()}
        if staged:
            self._finish(staged, moved)
            moved.progressed = True
        return moved

    def _finish(self, staged: dict[str, str], moved: Moved) -> None:
        """Copy staged jobs into v2 and drop the originals, READ_CHUNK jobs a read."""
        ids = sorted(staged)
        v1_seq = self.redis.get(self.v1.seq)  # after the detach: past every staged job's seq
        for start in range(0, len(ids), READ_CHUNK):
            chunk = ids[start : start + READ_CHUNK]
            pipe = self.redis.pipeline(transaction=False)
            for job_id in chunk:
                pipe.hgetall(self.v1.staged(job_id))
                pipe.pttl(self.v1.staged(job_id))
            replies = pipe.execute()
            batch: list[_Staged] = []
            gone: list[str] = []
            for i, job_id in enumerate(chunk):
                fields, pttl = replies[2 * i], replies[2 * i + 1]
                if not fields:  # its TTL ran out while staged (a dead or canceled job's)
                    gone.append(job_id)
                    continue
                batch.append(_staged(job_id, staged[job_id], fields, pttl))
                if sum(s.size for s in batch) >= COPY_BYTES:
                    self._copy(batch, v1_seq, moved)
                    batch = []
            if batch:
                self._copy(batch, v1_seq, moved)
            if gone:
                self._drop(gone)
                moved.expired += len(gone)

    def _copy(self, batch: list[_Staged], v1_seq: bytes | None, moved: Moved) -> None:
        k = self.v2
        indexes = [k.state_index(state) for state in V1_STATES[1:]]
        copied = self._call(
            "upgrade_copy",
            [
                k.pending,
                k.pending_since,
                k.seq,
                k.wake,
                *indexes,
                *(k.job(s.job_id) for s in batch),
            ],
            [self.wake_cap, v1_seq or "", *(arg for s in batch for arg in s.args)],
        )
        for staged, fresh in zip(batch, copied, strict=True):
            if fresh:
                moved.jobs[staged.state or UNINDEXED] += 1
            else:
                moved.present += 1
        # Only now, with every copy written, may the originals go.
        self._drop([s.job_id for s in batch])

    def _drop(self, ids: list[str]) -> None:
        self._call("upgrade_drop", [self.v1.moving, *(self.v1.staged(i) for i in ids)], ids)

    # --- idempotency keys ------------------------------------------------------------------

    def scan(self, cursor: int) -> tuple[int, list[str], list[bytes]]:
        """Return one SCAN step over the v1 keys: the next cursor, job ids, idempotency keys."""
        options: dict[str, Any] = {}
        if is_cluster(self.redis):
            # Every v1 key shares v1's hash tag: one slot, so one master holds them all (a
            # cluster-wide SCAN would hand back one cursor per master).
            options["target_nodes"] = self.redis.get_node_from_key(self.v1.prefix)  # type: ignore[attr-defined]
        cursor, names = self.redis.scan(
            cursor, match=self.v1.pattern, count=self.scan_count, **options
        )
        if isinstance(cursor, dict):  # a cluster names each node's cursor: {node: cursor}
            (cursor,) = cursor.values()
        job_prefix = self.v1.job_prefix.encode()
        idem_prefix = self.v1.idempotency_prefix.encode()
        job_ids = [n[len(job_prefix) :].decode() for n in names if n.startswith(job_prefix)]
        return int(cursor), job_ids, [n for n in names if n.startswith(idem_prefix)]

    def move_keys(self, names: Iterable[bytes]) -> Counter[str]:
        """Move v1 idempotency keys (their full names) whose job lives in v2, forget those whose
        job is gone, leave those whose job is still in v1 for a later pass; count each outcome."""
        outcomes: Counter[str] = Counter()
        suffixes = [n[len(self.v1.idempotency_prefix) :].decode() for n in names]
        pipe = self.redis.pipeline(transaction=False)
        for suffix in suffixes:
            pipe.hmget(self.v1.idempotency(suffix), "digest", "job_id")
        entries = [(s, d, j) for s, (d, j) in zip(suffixes, pipe.execute(), strict=True) if d and j]
        pipe = self.redis.pipeline(transaction=False)
        for _, _, job_id in entries:
            pipe.exists(self.v1.job(job_id.decode()), self.v1.staged(job_id.decode()))
            pipe.hmget(self.v2.job(job_id.decode()), *REQUEST_FIELDS)
        found = pipe.execute()
        for i, (suffix, digest, job_id) in enumerate(entries):
            in_v1, request = found[2 * i], found[2 * i + 1]
            if in_v1:
                outcomes["waiting"] += 1  # its job moves first; a later pass moves the key
                continue
            v2_digest = _v2_digest(digest.decode(), request) if request[0] else ""
            code = Code(
                self._call(
                    "upgrade_idem",
                    [self.v1.idempotency(suffix), self.v2.idempotency(suffix)],
                    [digest, job_id, v2_digest, DEFAULT_QUEUE],
                )[0]
            )
            outcomes[_key_outcome(code, v2_digest)] += 1
        return outcomes

    # --- whole runs ------------------------------------------------------------------------

    def run(self, *, batch: int = BATCH, now_ms: int | None = None) -> Moved:
        """Move every job v1 holds (but those under a live lease), then its idempotency keys."""
        total = Moved()
        while True:
            moved = self.move_jobs(batch, now_ms=now_ms)
            total.add(moved)
            if not moved.progressed:
                break
        cursor = 0
        while True:  # one walk of every v1 key: hashes no index names, idempotency keys
            cursor, job_ids, names = self.scan(cursor)
            if job_ids:
                # A job held at the index pass that its old worker finished since is named by
                # an index again, which this pass leaves alone: it still counts as held, so
                # --wait runs once more to move it rather than say "done" with it in v1.
                held = total.held
                total.add(self.move_jobs(0, unindexed=job_ids, now_ms=now_ms))
                total.held = max(held, total.held)
            if names:
                total.keys.update(self.move_keys(names))
            if cursor == 0:
                return total

    def census(self, *, now_ms: int | None = None) -> Census:
        """Return what a run would move, without moving anything."""
        if now_ms is None:  # Redis's clock, as upgrade_detach reads it: leases are on it
            seconds, micros = self.redis.time()
            now_ms = seconds * 1000 + micros // 1000
        pipe = self.redis.pipeline(transaction=False)
        for state in V1_STATES:
            pipe.zcard(self.v1.state_index(state))
        pipe.zcount(self.v1.state_index("processing"), now_ms, "+inf")
        pipe.hlen(self.v1.moving)
        *cards, held, staged = pipe.execute()
        by_state = dict(zip(V1_STATES, cards, strict=True))
        by_state["processing"] -= held
        job_hashes = idempotency_keys = 0
        cursor = 0
        while True:
            cursor, job_ids, names = self.scan(cursor)
            job_hashes += len(job_ids)
            idempotency_keys += len(names)
            if cursor == 0:
                return Census(by_state, held, staged, job_hashes, idempotency_keys)


def _staged(job_id: str, record: str, fields: dict[bytes, bytes], pttl: int) -> _Staged:
    """Return upgrade_copy's record of a staged job (see its header)."""
    state, score, since, member = record.split("|", 3)
    if state == "pending" and not since:  # v1 always indexed both; a hand-edited Redis may not
        since = (fields.get(b"eligible_at") or fields.get(b"created_at") or b"0").decode()
    pairs = [item for pair in fields.items() for item in pair]
    args = [job_id, state, score, since, member, pttl, len(fields), *pairs]
    return _Staged(job_id, state, args, sum(len(item) for item in pairs))


def request_digests(request: Sequence[bytes | None]) -> tuple[str, str]:
    """Return the v1 and v2 idempotency digests of the request that made a job.

    `request`: the job's REQUEST_FIELDS values. v1's canonical request is v2's without its
    queue (shared.jobs.EnqueueRequest.canonical); a job moved from v1 is in the default queue.
    """
    kind, payload, priority, max_retries, scheduled_at, timeout = request
    if kind is None or payload is None or priority is None or max_retries is None:
        raise ValueError("the job's hash lacks a field of its request")
    v2 = EnqueueRequest(
        type=kind.decode(),
        payload_json=payload.decode(),
        priority=int(priority),
        max_retries=int(max_retries),
        scheduled_at_ms=int(scheduled_at) if scheduled_at is not None else None,
        timeout=float(timeout) if timeout is not None else None,
        queue=DEFAULT_QUEUE,
    ).canonical()
    body = {name: value for name, value in json.loads(v2).items() if name != "queue"}
    v1 = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return _sha256(v1), _sha256(v2)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _v2_digest(v1_digest: str, request: Sequence[bytes | None]) -> str:
    """Return the digest the v2 key gets: the request's, or one no request has."""
    try:
        rebuilt_v1, v2 = request_digests(request)
    except (ValueError, UnicodeError):
        rebuilt_v1, v2 = "", ""
    return v2 if rebuilt_v1 == v1_digest else f"v1:{v1_digest}"


def _key_outcome(code: Code, v2_digest: str) -> str:
    if code is Code.DONE:
        if not v2_digest:
            return "forgotten"
        return "refused" if v2_digest.startswith("v1:") else "moved"
    if code is Code.DUPLICATE:
        return "superseded"  # a v2 key of that name was there, and stays
    return "changed" if code is Code.WRONG_STATE else "gone"


# --- the command ---------------------------------------------------------------------------


def _states(counts: dict[str, int]) -> str:
    listed = ", ".join(f"{state} {n}" for state, n in counts.items() if n)
    total = sum(counts.values())
    return f"{listed} ({total} job{'' if total == 1 else 's'})" if listed else "no job"


def _print_census(upgrade: Upgrade, census: Census) -> None:
    print(f"would move to queue {DEFAULT_QUEUE} ({upgrade.v2.prefix}…): {_states(census.by_state)}")
    if census.staged:
        print(f"staged by an interrupted run, would finish: {census.staged}")
    if census.held:
        print(f"would stay in v1 for now: {census.held} processing under a live lease")
    print(f"v1 job hashes found by a key scan: {census.job_hashes}")
    print(f"idempotency keys: {census.idempotency_keys}")


def _print_moved(moved: Moved) -> None:
    jobs = {state: moved.jobs[state] for state in (*V1_STATES, UNINDEXED)}
    print(f"moved to queue {DEFAULT_QUEUE}: {_states(jobs)}")
    if moved.present or moved.expired or moved.dangling:
        print(
            f"finished after an interrupted run: {moved.present}; expired while staged: "
            f"{moved.expired}; v1 index entries without a job, removed: {moved.dangling}"
        )
    if moved.keys:
        print("idempotency keys: " + ", ".join(f"{n} {what}" for what, n in moved.keys.items()))
    if moved.held:
        print(
            f"left in v1: {moved.held} processing under a live lease (an old workerd runs them): "
            "they move once finished or once the lease runs out, by this command run again "
            "or by workerd's scheduler"
        )


def main(argv: list[str] | None = None) -> int:
    """Move the jobs of layout v1 into v2's default queue; exit 0 done, 1 error, 2 usage."""
    parser = argparse.ArgumentParser(
        prog="python -m shared.upgrade",
        description="Move jobs and idempotency keys of layout v1 ({taskforge}:v1:) into the "
        "default queue of layout v2. Safe to run again, and while gateways and workerd run.",
        epilog="exit codes: 0 done; 1 Redis error, or jobs still running under v1 after --wait; "
        "2 usage or configuration error. Reads REDIS_URL and TASKFORGE_NAMESPACE.",
    )
    parser.add_argument("--dry-run", action="store_true", help="print what would move, by state")
    parser.add_argument(
        "--v1-prefix",
        help="v1's key prefix (TASKFORGE_KEY_PREFIX then); default {<TASKFORGE_NAMESPACE>}:v1:",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="while jobs under a live lease stay in v1, run again each second up to this long "
        "(exit 1 if some are left)",
    )
    args = parser.parse_args(argv)
    settings = load_or_exit()
    try:
        v1 = V1Keys(args.v1_prefix) if args.v1_prefix else None
        upgrade = Upgrade(connect(settings, role="upgrade"), Keys(settings.namespace), v1)
    except ValueError as exc:
        print(f"taskforge upgrade: {exc}", file=sys.stderr)
        return 2
    print(f"v1 prefix {upgrade.v1.prefix} → layout v2, namespace {upgrade.v2.namespace}")
    try:
        if args.dry_run:
            _print_census(upgrade, upgrade.census())
            return 0
        moved = upgrade.run()
        deadline = time.monotonic() + args.wait
        while moved.held and time.monotonic() < deadline:
            time.sleep(1.0)  # a lease runs for TASK_VISIBILITY_TIMEOUT: poll, bounded
            moved.add(upgrade.run())
    except redis.RedisError as exc:
        print(f"taskforge upgrade: Redis error: {error_text(exc)}", file=sys.stderr)
        return 1
    _print_moved(moved)
    if moved.held and args.wait:
        print("taskforge upgrade: jobs are still running under v1", file=sys.stderr)
        return 1
    print("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
