"""Paging through a listing while other jobs move: every job that stays in its state is listed
exactly once, in its state's order.

Two forms, on the private redis-server:

- interleaved (Hypothesis): between every two pages, a drawn number of moves of OTHER jobs:
  jobs leave the state (the cursor's own job among them), new ones arrive anywhere in the
  order, running jobs' leases renew (the processing index's score moves). Exact
  interleavings, shrunk to the smallest on failure.
- concurrent: a background thread with its own connection runs real transitions on other
  jobs (enqueue, claim, complete, fail, cancel, renew) for as long as the main thread pages,
  so moves also land between a page's index read and its read of the jobs.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Iterator

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.engine.engine_types import Code
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState, format_ms
from shared.read.listing import parse_cursor
from tests.engine.conftest import POLICY, T0, K, request
from tests.engine.listing_support import Seed, expected, flat, pages, seed
from tests.support.redis_server import RedisServer
from tests.support.tools import wait_until

QUEUES = ["a", "b"]
SPAN = 40  # scores drawn from T0 .. T0 + SPAN ms: ties are common
JOIN_TIMEOUT = 10.0  # seconds for the mover thread to stop once told
MOVES = 40  # at most, per example of the interleaved test


def new_id(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def place(state: JobState, rng: random.Random) -> int:
    """Return a seeding time: scheduled jobs wait in the future, the others sit near T0."""
    at = T0 + rng.randrange(SPAN)
    return at + 60_000 if state is JobState.SCHEDULED else at


def leave(scripts: Scripts, state: JobState, jid: str, queue: str, now: int) -> None:
    """Take one job out of `state` by the transition that does it (trim's effect for the two
    finished states that have none by id)."""
    if state in (JobState.PENDING, JobState.SCHEDULED, JobState.RETRYING):
        assert scripts.cancel(jid, queue=queue, now_ms=now).changed
    elif state is JobState.PROCESSING:
        token = int(scripts.redis.hget(K.for_queue(queue).job(jid), "token"))
        assert scripts.complete(jid, token, queue=queue, now_ms=now).code is Code.DONE
    elif state is JobState.DEAD:
        scripts.purge(jid, queue=queue)
    else:
        keys = K.for_queue(queue)
        scripts.redis.zrem(keys.state_index(state), jid)
        scripts.redis.delete(keys.job(jid))


class Mover:
    """The jobs of one listing that may move (the others stay), and the moves."""

    def __init__(self, scripts: Scripts, state: JobState, rng: random.Random) -> None:
        self.scripts, self.state, self.rng = scripts, state, rng
        self.volatile: dict[str, str] = {}  # id -> queue, still in the state
        self.moved: set[str] = set()  # every id that left or arrived while paging

    def add(self, jid: str, queue: str) -> None:
        seed(self.scripts, self.state, jid, place(self.state, self.rng), queue=queue,
             priority=self.rng.choice((-1, 0, 0, 2)))  # fmt: skip
        self.volatile[jid] = queue

    def leave(self, jid: str) -> None:
        queue = self.volatile.pop(jid)
        leave(self.scripts, self.state, jid, queue, T0 + SPAN + 1)
        self.moved.add(jid)

    def step(self, cursor: str) -> None:
        """One move: the cursor's job leaves (when it may), another leaves, one arrives, or
        every running job's lease is renewed."""
        rng = self.rng
        move = rng.choice(("cursor", "leave", "arrive", "arrive", "renew"))
        cursor_job = parse_cursor(cursor).job_id
        if move == "cursor" and cursor_job in self.volatile:
            self.leave(cursor_job)
        elif move == "leave" and self.volatile:
            self.leave(rng.choice(sorted(self.volatile)))
        elif move == "renew" and self.state is JobState.PROCESSING:
            self.renew_all()
        else:
            jid = new_id(rng)
            self.add(jid, rng.choice(QUEUES))
            self.moved.add(jid)

    def renew_all(self) -> None:
        now = T0 + 1_000 + self.rng.randrange(10_000)
        for queue in QUEUES:
            keys = K.for_queue(queue)
            for raw in self.scripts.redis.zrange(keys.processing, 0, -1):
                jid = raw.decode()
                token = int(self.scripts.redis.hget(keys.job(jid), "token"))
                self.scripts.renew([(jid, token)], queue=queue, now_ms=now)


@pytest.fixture(scope="module")
def engine(redis_server: RedisServer) -> Iterator[Scripts]:
    redis_server.start()
    client = redis.Redis.from_url(redis_server.url)
    scripts = Scripts(client, K, POLICY)
    scripts.load()
    yield scripts
    client.close()


def seed_listing(
    scripts: Scripts, state: JobState, rng: random.Random, stable: int, volatile: int
) -> tuple[list[Seed], Mover]:
    """Seed `stable` jobs that stay and `volatile` ones the mover may take away, interleaved."""
    mover = Mover(scripts, state, rng)
    kept: list[Seed] = []
    stays = [True] * stable + [False] * volatile
    rng.shuffle(stays)
    for n, stay in enumerate(stays):
        jid, queue = new_id(rng), rng.choice(QUEUES)
        if stay:
            at, priority = place(state, rng), rng.choice((-1, 0, 0, 2))
            seed(scripts, state, jid, at, queue=queue, priority=priority)
            kept.append(Seed(jid, queue, at, priority, n))
        else:
            mover.add(jid, queue)
    return kept, mover


def assert_each_stable_job_once_in_order(
    state: JobState, kept: list[Seed], found: list[str]
) -> None:
    assert len(found) == len(set(found)), "a job was listed twice"
    stable = {s.id for s in kept}
    in_listing = [jid for jid in found if jid in stable]
    assert sorted(in_listing) == sorted(stable), "a job that stayed was skipped"
    if state is JobState.PENDING:
        # Across queues pending merges per-queue sequences: check each queue's own order.
        for queue in QUEUES:
            mine = [s for s in kept if s.queue == queue]
            assert [j for j in in_listing if j in {s.id for s in mine}] == expected(state, mine)
    else:
        assert in_listing == expected(state, kept)


@pytest.mark.parametrize("state", list(JobState))
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,  # a fixed seed: the same draws on every run
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_moves_between_pages_never_repeat_or_skip_a_job_that_stayed(
    engine: Scripts, state: JobState, data: st.DataObject
) -> None:
    engine.redis.flushall()
    rng = random.Random(data.draw(st.integers(0, 2**32), label="seed"))
    kept, mover = seed_listing(
        engine,
        state,
        rng,
        data.draw(st.integers(1, 12), label="stable"),
        data.draw(st.integers(0, 12), label="volatile"),
    )
    limit = data.draw(st.integers(1, 5), label="limit")
    queues = data.draw(st.sampled_from([QUEUES, ["a"]]), label="queues")
    if queues == ["a"]:
        kept = [s for s in kept if s.queue == "a"]

    moves = [MOVES]  # left to make

    def between(cursor: str) -> None:
        for _ in range(min(moves[0], data.draw(st.integers(0, 4), label="moves"))):
            mover.step(cursor)
            moves[0] -= 1

    # Every page but the last passes at least one entry, never to see it again: at most one
    # page per job there ever was. A listing going round in circles meets the bound fast.
    bound = 1 + len(kept) + len(mover.volatile) + MOVES
    found = flat(pages(engine, state, queues, limit, between=between, max_pages=bound))

    assert_each_stable_job_once_in_order(state, kept, found)


# --- a real background thread ----------------------------------------------------------------


class Background(threading.Thread):
    """Runs real transitions on jobs of its own until told to stop; counts what it did."""

    def __init__(self, url: str, state: JobState, seed_value: int) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(url, socket_timeout=10)
        self.scripts = Scripts(self.client, K, POLICY)
        self.state, self.rng = state, random.Random(seed_value)
        self.stop = threading.Event()
        self.moves = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.one_round()
                self.moves += 1
        except BaseException as exc:  # reported by the test thread
            self.error = exc
        finally:
            self.client.close()

    def one_round(self) -> None:
        """Enqueue a job of the mover's own, run it somewhere, sometimes take it away again.

        Its priority tops every other pending job (a job it leaves pending gets one less), so
        the claim takes it, never a job that stays.
        """
        rng, s = self.rng, self.scripts
        queue = rng.choice(QUEUES)
        at = T0 + rng.randrange(SPAN)
        jid = new_id(rng)
        if rng.random() < 0.2:
            later = request("t", queue=queue, scheduled_at=format_ms(at + 60_000))
            s.enqueue(later, jid, now_ms=T0)
            if rng.random() < 0.5:
                s.cancel(jid, queue=queue, now_ms=at)
            return
        outcome = rng.choice(("stay", "cancel", "complete", "fail", "fail", "run"))
        priority = 999 if outcome == "stay" else 1_000
        s.enqueue(request("t", queue=queue, priority=priority, max_retries=2), jid, now_ms=at)
        if outcome == "stay":
            return
        if outcome == "cancel":
            s.cancel(jid, queue=queue, now_ms=at)
            return
        job = s.claim(f"mover-{jid}", queue=queue, now_ms=at)
        assert job is not None and job.id == jid
        if outcome == "complete":
            s.complete(jid, job.token, queue=queue, now_ms=at + 1)
        elif outcome == "fail":
            s.fail(jid, job.token, "E: x", queue=queue, now_ms=at + 1)
        else:  # stays running; every running job's lease is renewed
            for raw in self.client.zrange(K.for_queue(queue).processing, 0, -1):
                other = raw.decode()
                token = int(self.client.hget(K.for_queue(queue).job(other), "token"))
                s.renew([(other, token)], queue=queue, now_ms=at + rng.randrange(5_000))


@pytest.mark.parametrize("state", list(JobState))
def test_paging_while_a_thread_moves_other_jobs_lists_each_stable_job_once(
    r: redis.Redis, redis_server: RedisServer, state: JobState
) -> None:
    scripts = Scripts(r, K, POLICY)
    scripts.load()
    rng = random.Random(14)
    kept = []
    for n in range(60):
        jid, queue = new_id(rng), QUEUES[n % 2]
        at, priority = place(state, rng), rng.choice((-1, 0, 2))
        seed(scripts, state, jid, at, queue=queue, priority=priority)
        kept.append(Seed(jid, queue, at, priority, n))
    mover = Background(redis_server.url, state, 15)  # not 14: its ids would be the seeds
    moves_before: list[int] = []

    def between(_: str) -> None:
        # Each page waits for a move of the mover's first (bounded): on a loaded machine the
        # pages could otherwise all be read before the thread ran once.
        seen = mover.moves
        wait_until(lambda: mover.moves > seen or mover.error is not None, 10, "a move")
        moves_before.append(mover.moves)

    mover.start()
    try:
        found = flat(pages(scripts, state, QUEUES, 2, between=between))
    finally:
        mover.stop.set()
        mover.join(JOIN_TIMEOUT)
    assert not mover.is_alive(), "the mover thread did not stop"
    assert mover.error is None, repr(mover.error)

    # The mover really ran while the pages were read, not only before or after.
    assert moves_before[-1] > moves_before[0]
    assert_each_stable_job_once_in_order(state, kept, found)
