"""shared.read.listing and list_page.lua on the private redis-server: every state's order, cursors
that survive their job leaving, ties, several queues, the type filter, the cost of a page.

Jobs are seeded through the transition scripts with an explicit clock, so each one's place in
its state's order is known in advance; the expected order is computed here from those seeds,
not read from the indexes.
"""

from __future__ import annotations

from collections import Counter

import pytest
import redis

from shared.engine.engine_types import Code
from shared.engine.scripts import Scripts
from shared.model.jobs import JobState
from shared.read import listing
from shared.read.listing import BadCursor, Position, list_jobs, parse_cursor
from tests.engine.conftest import T0, K, job_id, request, snapshot
from tests.engine.listing_support import DEFAULT, Seed, expected, flat, pages, seed
from tests.engine.test_budgets import commands_of

# Scores with ties and gaps: several jobs share a millisecond, and the order within one is
# by id (descending where the state lists newest first).
TIMES = [T0 + 5, T0 + 1, T0 + 5, T0 + 3, T0 + 5, T0 + 2, T0 + 9, T0 + 1, T0 + 7, T0 + 5, T0 + 4]


def seed_state(scripts: Scripts, state: JobState, queues: list[str]) -> list[Seed]:
    seeds = []
    for n, at in enumerate(TIMES):
        # Ids not in time order, so the id tie-break is really tested.
        jid = job_id(100 + (n * 7) % 13)
        queue = queues[n % len(queues)]
        priority = (n * 5) % 3 - 1
        if state is JobState.SCHEDULED:
            at += 60_000  # in the future, so the job waits
        seed(scripts, state, jid, at, queue=queue, priority=priority)
        seeds.append(Seed(jid, queue, at, priority, n))
    return seeds


@pytest.mark.parametrize("state", list(JobState))
@pytest.mark.parametrize("limit", [1, 3, len(TIMES), 1000])
def test_every_state_pages_in_its_order_each_job_once(
    scripts: Scripts, state: JobState, limit: int
) -> None:
    seeds = seed_state(scripts, state, [DEFAULT])

    found = pages(scripts, state, [DEFAULT], limit)

    assert flat(found) == expected(state, seeds)
    assert all(len(page) == limit for page in found[:-1])
    assert found[-1]  # no empty last page: the end is known when the last full page is read


def test_pending_lists_in_the_order_claims_take_the_jobs(scripts: Scripts) -> None:
    seeds = seed_state(scripts, JobState.PENDING, [DEFAULT])
    listed = flat(pages(scripts, JobState.PENDING, [DEFAULT], 4))

    claimed = []
    while (job := scripts.claim("w1", now_ms=T0 + 100)) is not None:
        claimed.append(job.id)

    assert listed == claimed == expected(JobState.PENDING, seeds)


@pytest.mark.parametrize("state", list(JobState))
def test_an_empty_state_is_one_empty_page(scripts: Scripts, state: JobState) -> None:
    page = list_jobs(scripts, state, [DEFAULT, "other"])
    assert (page.jobs, page.next_cursor) == ([], None)


def test_the_jobs_are_the_jobs_get_returns_with_their_queue(scripts: Scripts) -> None:
    seed(scripts, JobState.DEAD, job_id(1), T0, queue="mail", job_type="send")

    [job] = list_jobs(scripts, JobState.DEAD, ["mail"]).jobs

    assert (job.id, job.queue, job.type, job.status) == (job_id(1), "mail", "send", JobState.DEAD)
    assert job.last_error == "E: x" and job.finished_at == T0


# --- the cursor's own job moves ------------------------------------------------------------


def test_a_page_after_the_cursors_job_was_claimed_starts_right_after_its_place(
    scripts: Scripts,
) -> None:
    for n in range(6):
        seed(scripts, JobState.PENDING, job_id(n), T0)
    first = list_jobs(scripts, JobState.PENDING, [DEFAULT], limit=3)
    assert [j.id for j in first.jobs] == [job_id(0), job_id(1), job_id(2)]
    # Claims take the first three, the cursor's job among them.
    for n in range(3):
        assert scripts.claim("w1", now_ms=T0).id == job_id(n)

    second = list_jobs(scripts, JobState.PENDING, [DEFAULT], limit=3, cursor=first.next_cursor)

    assert [j.id for j in second.jobs] == [job_id(3), job_id(4), job_id(5)]
    assert second.next_cursor is None


@pytest.mark.parametrize("state", [JobState.DEAD, JobState.SCHEDULED, JobState.CANCELED])
def test_a_page_after_the_cursors_job_left_lists_every_remaining_job_once(
    scripts: Scripts, state: JobState
) -> None:
    seeds = seed_state(scripts, state, [DEFAULT])
    order = expected(state, seeds)
    gone: list[str] = []

    def remove_cursor_job(cursor: str) -> None:
        jid = parse_cursor(cursor).job_id
        gone.append(jid)
        if state is JobState.DEAD:
            scripts.purge(jid)
        elif state is JobState.SCHEDULED:
            scripts.cancel(jid, now_ms=T0)
        else:
            scripts.redis.zrem(K.canceled, jid)  # what trim does at retention
            scripts.redis.delete(K.job(jid))

    found = flat(pages(scripts, state, [DEFAULT], 2, between=remove_cursor_job))

    assert found == order
    assert len(gone) == (len(order) - 1) // 2


def test_a_cursor_whose_job_came_back_later_in_the_index_still_marks_its_old_place(
    scripts: Scripts,
) -> None:
    for n in range(4):
        seed(scripts, JobState.DEAD, job_id(n), T0 + n)
    first = list_jobs(scripts, JobState.DEAD, [DEFAULT], limit=2)
    assert [j.id for j in first.jobs] == [job_id(3), job_id(2)]
    # The cursor's job is replayed and dies again: its entry is newer now, before the cursor.
    assert scripts.replay(job_id(2)).status is JobState.PENDING
    token = scripts.claim("w9", now_ms=T0 + 50).token
    assert scripts.fail(job_id(2), token, "E: again", now_ms=T0 + 50).code is Code.DEAD

    second = list_jobs(scripts, JobState.DEAD, [DEFAULT], limit=2, cursor=first.next_cursor)

    assert [j.id for j in second.jobs] == [job_id(1), job_id(0)]


# More jobs at one score than list_page.lua reads to place a cursor (its TIE_SCAN): the probe.
MANY_TIES = 130


@pytest.mark.parametrize("cursor_at", ["its entry", "few ties", "many ties"])
@pytest.mark.parametrize("state", [JobState.PENDING, JobState.COMPLETED])
def test_a_page_read_leaves_redis_exactly_as_it_was(
    r: redis.Redis, scripts: Scripts, state: JobState, cursor_at: str
) -> None:
    ties = MANY_TIES if cursor_at == "many ties" else 3
    for n in range(ties + 5):
        seed(scripts, state, job_id(n), T0 + (0 if n < ties else n))
    first = list_jobs(scripts, state, [DEFAULT], limit=ties // 2)
    at = parse_cursor(first.next_cursor)
    if cursor_at != "its entry":
        r.zrem(K.state_index(state), at.member)  # its job left (claimed, trimmed)
    before = snapshot(r)

    page = list_jobs(scripts, state, [DEFAULT], limit=ties // 2, cursor=first.next_cursor)

    assert snapshot(r) == before
    assert page.jobs and at.job_id not in {job.id for job in page.jobs}


@pytest.mark.parametrize("ties", [0, 1, 5, 99, 100, 101, MANY_TIES])
@pytest.mark.parametrize("state", [JobState.PENDING, JobState.DEAD])
def test_a_gone_cursor_among_any_number_of_ties_resumes_right_after_its_place(
    r: redis.Redis, scripts: Scripts, state: JobState, ties: int
) -> None:
    # `ties` jobs at the cursor's score besides its own, on either side of it, and others
    # at the scores around it.
    at = T0 + 10
    ids = {n: job_id(1000 + n) for n in range(ties + 1)}
    cursor_n = ties // 2
    for jid in ids.values():
        seed(scripts, state, jid, at, priority=0)
    for n in range(5):
        seed(scripts, state, job_id(n), at - 5 + n * 3, priority=1 - n % 3)
    order = flat(pages(scripts, state, [DEFAULT], 1_000))
    cursor = next(
        p for p in (parse_cursor(c) for c in _cursors(scripts, state)) if p.job_id == ids[cursor_n]
    )
    r.zrem(K.state_index(state), cursor.member)

    rest = flat(pages_from(scripts, state, cursor.cursor()))

    assert rest == order[order.index(ids[cursor_n]) + 1 :]


def _cursors(scripts: Scripts, state: JobState) -> list[str]:
    """Return the cursor of every entry, paging one at a time."""
    cursors, cursor = [], None
    for _ in range(1_000):
        page = list_jobs(scripts, state, [DEFAULT], limit=1, cursor=cursor)
        if page.next_cursor is None:
            return cursors
        cursors.append(page.next_cursor)
        cursor = page.next_cursor
    raise AssertionError("the listing did not end")


def pages_from(scripts: Scripts, state: JobState, cursor: str) -> list[list[str]]:
    found = []
    while cursor is not None:
        page = list_jobs(scripts, state, [DEFAULT], limit=7, cursor=cursor)
        found.append([job.id for job in page.jobs])
        cursor = page.next_cursor
    return found


# --- ties ----------------------------------------------------------------------------------


@pytest.mark.parametrize("state", [JobState.PENDING, JobState.COMPLETED, JobState.PROCESSING])
def test_ties_at_one_score_page_by_member_each_job_once(scripts: Scripts, state: JobState) -> None:
    ids = [job_id(n) for n in (5, 1, 9, 3, 7, 2, 8)]
    for jid in ids:
        seed(scripts, state, jid, T0)

    found = pages(scripts, state, [DEFAULT], 2)

    if state is JobState.PENDING:
        assert flat(found) == ids  # first in, first out
    else:
        assert flat(found) == sorted(ids, reverse=True)


def test_the_cursor_of_a_gone_job_among_ties_resumes_between_its_neighbours(
    scripts: Scripts,
) -> None:
    for n in range(1, 8):
        seed(scripts, JobState.COMPLETED, job_id(n), T0)
    first = list_jobs(scripts, JobState.COMPLETED, [DEFAULT], limit=3)
    assert [j.id for j in first.jobs] == [job_id(7), job_id(6), job_id(5)]
    for n in (5, 4):  # the cursor's job and the next one go (trim deletes index and hash)
        scripts.redis.zrem(K.completed, job_id(n))

    second = list_jobs(scripts, JobState.COMPLETED, [DEFAULT], limit=3, cursor=first.next_cursor)

    assert [j.id for j in second.jobs] == [job_id(3), job_id(2), job_id(1)]


# --- several queues ------------------------------------------------------------------------


@pytest.mark.parametrize("state", list(JobState))
@pytest.mark.parametrize("limit", [1, 4])
def test_several_queues_page_as_one_order_each_job_once(
    scripts: Scripts, state: JobState, limit: int
) -> None:
    queues = ["a", "b", "c"]
    seeds = seed_state(scripts, state, queues)

    found = flat(pages(scripts, state, queues, limit))

    if state is JobState.PENDING:
        # Across queues: priority, then each queue's own sequence (claims are per queue).
        assert sorted(found) == sorted(s.id for s in seeds)
        by_id = {s.id: s for s in seeds}
        priorities = [-by_id[jid].priority for jid in found]
        assert priorities == sorted(priorities)
        for queue in queues:
            mine = [jid for jid in found if by_id[jid].queue == queue]
            assert mine == expected(state, [s for s in seeds if s.queue == queue])
    else:
        assert found == expected(state, seeds)


def test_pending_across_queues_with_many_ties_pages_each_job_once_and_writes_nothing(
    r: redis.Redis, scripts: Scripts
) -> None:
    # In the queue without the cursor's entry, its place among the ties needs the probe.
    ids = {queue: [job_id(n + offset) for n in range(MANY_TIES)] for queue, offset in
           (("a", 0), ("b", 500))}  # fmt: skip
    for queue, jids in ids.items():
        for jid in jids:
            seed(scripts, JobState.PENDING, jid, T0, queue=queue)
    before = snapshot(r, K.for_queue("a")), snapshot(r, K.for_queue("b"))

    found = flat(pages(scripts, JobState.PENDING, ["a", "b"], 40))

    assert sorted(found) == sorted(ids["a"] + ids["b"])
    for jids in ids.values():
        assert [jid for jid in found if jid in set(jids)] == jids  # first in, first out
    assert (snapshot(r, K.for_queue("a")), snapshot(r, K.for_queue("b"))) == before


def test_a_queue_filter_lists_that_queue_only(scripts: Scripts) -> None:
    seeds = seed_state(scripts, JobState.COMPLETED, ["a", "b"])

    found = flat(pages(scripts, JobState.COMPLETED, ["b"], 2))

    assert found == expected(JobState.COMPLETED, [s for s in seeds if s.queue == "b"])
    assert list_jobs(scripts, JobState.COMPLETED, ["nowhere"]).jobs == []


def test_each_listed_job_names_the_queue_it_came_from(scripts: Scripts) -> None:
    seeds = seed_state(scripts, JobState.RETRYING, ["a", "b", "c"])

    jobs = list_jobs(scripts, JobState.RETRYING, ["a", "b", "c"], limit=100).jobs

    assert {(j.id, j.queue) for j in jobs} == {(s.id, s.queue) for s in seeds}


# --- the type filter -----------------------------------------------------------------------


@pytest.mark.parametrize("state", list(JobState))
def test_a_type_filter_lists_that_type_only_each_job_once(
    scripts: Scripts, state: JobState
) -> None:
    queues = ["a", "b"]
    wanted = []
    for n, at in enumerate(TIMES * 3):
        jid = job_id(200 + n)
        job_type = "match" if n % 4 == 1 else "other"
        at = at + n + (60_000 if state is JobState.SCHEDULED else 0)
        seed(scripts, state, jid, at, queue=queues[n % 2], job_type=job_type)
        if job_type == "match":
            wanted.append(Seed(jid, queues[n % 2], at, 0, n))

    found = pages(scripts, state, queues, 2, job_type="match")

    assert flat(found) == expected(state, wanted)


def test_a_type_filter_examines_a_bounded_number_of_entries_per_page(scripts: Scripts) -> None:
    # 30 others, then one match: with limit 1, a page looks at 10 entries at most.
    for n in range(30):
        seed(scripts, JobState.COMPLETED, job_id(300 + n), T0 + 100 - n, job_type="other")
    seed(scripts, JobState.COMPLETED, job_id(999), T0, job_type="match")

    found = pages(scripts, JobState.COMPLETED, [DEFAULT], 1, job_type="match")

    assert found == [[], [], [], [job_id(999)]]


def test_a_type_filter_page_costs_one_read_per_entry_examined(
    r: redis.Redis, scripts: Scripts
) -> None:
    for n in range(50):
        seed(scripts, JobState.COMPLETED, job_id(300 + n), T0 + n, job_type="other")
    scripts.load()

    counts = commands_of(
        r, lambda: scripts.redis.evalsha(*_page_call(scripts, JobState.COMPLETED, 2, "match"))
    )

    assert counts["hget"] == 20 and counts["zrange"] == 1  # 2 × 10 examined
    assert sum(counts.values()) == 22  # and a ZCARD: entries lie past the 20th


def test_a_type_filter_across_queues_skips_nothing_past_where_a_queue_stopped(
    scripts: Scripts,
) -> None:
    # Queue a: others every 2 ms from T0+1000 down, its match among them at T0+979, so a page
    # of 1 (10 entries examined) stops short of its match. Queue b: matches, two of them
    # before where a stops: the page must not go past a's stop, nor its cursor past b's.
    for n in range(25):
        seed(scripts, JobState.DEAD, job_id(400 + n), T0 + 1000 - 2 * n, queue="a", job_type="x")
    times = {job_id(499): T0 + 979}
    for n, offset in enumerate((1100, 995, 700, 300)):
        times[job_id(500 + n)] = T0 + offset
    for jid, at in times.items():
        seed(
            scripts, JobState.DEAD, jid, at, queue="a" if jid == job_id(499) else "b", job_type="m"
        )

    found = flat(pages(scripts, JobState.DEAD, ["a", "b"], 1, job_type="m"))

    assert found == sorted(times, key=lambda jid: times[jid], reverse=True)


# --- processing ------------------------------------------------------------------------------


def test_running_jobs_page_by_start_while_their_leases_renew(scripts: Scripts) -> None:
    tokens = {}
    for n in range(7):
        jid = job_id(n)
        scripts.enqueue(request(), jid, now_ms=T0 + n)
        tokens[jid] = scripts.claim(f"w{n}", now_ms=T0 + 10 * (n % 3) + n).token

    def renew_all(_: str) -> None:
        # Every renewal moves the lease deadline, the processing index's score, in reverse.
        for step, (jid, token) in enumerate(reversed(tokens.items())):
            assert scripts.renew([(jid, token)], now_ms=T0 + 1000 + step) == [Code.DONE]

    found = flat(pages(scripts, JobState.PROCESSING, [DEFAULT], 2, between=renew_all))

    started = {jid: T0 + 10 * (n % 3) + n for n, jid in enumerate(tokens)}
    assert found == sorted(started, key=lambda jid: (started[jid], jid), reverse=True)


# --- cursors and the cost of a page ----------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "",
        "12",
        "x:" + job_id(1),
        "12:ABCDEF00-0000-4000-8000-000000000001",  # ids are lower case
        "12:0000000000000001" + job_id(1),
        "12:1:" + job_id(1),
        "١٢:" + job_id(1),  # digits of another script
        "12345678901234567:" + job_id(1),
        "12:" + job_id(1) + "\n",
    ],
)
def test_a_cursor_this_module_did_not_make_is_refused(text: str) -> None:
    with pytest.raises(BadCursor):
        parse_cursor(text)


def test_a_cursor_names_a_score_and_a_member() -> None:
    member = f"{7:016d}:{job_id(1)}"
    assert parse_cursor(f"-5:{member}") == Position(-5, member)
    assert parse_cursor(Position(T0, job_id(2)).cursor()) == Position(T0, job_id(2))


def _page_call(
    scripts: Scripts, state: JobState, limit: int, job_type: str = "", cursor: str | None = None
) -> tuple[object, ...]:
    """Return EVALSHA arguments of one list_page call (the script itself, no pipeline)."""
    sha = scripts.transport.shas["list_page"]
    after = parse_cursor(cursor) if cursor else None
    score, member = (str(after.score), after.member) if after else ("", "")
    budget = listing.scan_budget(limit, job_type or None)
    args = [K.job_prefix, listing.ORDER[state], score, member, limit, budget, job_type]
    return (sha, 1, K.state_index(state), *args)


@pytest.mark.parametrize(
    ("cursor_at", "commands"),
    [
        ("its entry", {"zscore": 1, "zrank": 1}),
        ("few ties", {"zscore": 1, "zcount": 2, "zrange": 1}),
        ("many ties", {"zscore": 1, "zcount": 1, "zadd": 1, "zrank": 1, "zrem": 1}),
    ],
)
def test_a_page_costs_a_fixed_number_of_commands_whatever_the_index_holds(
    r: redis.Redis, scripts: Scripts, cursor_at: str, commands: dict[str, int]
) -> None:
    ties = MANY_TIES if cursor_at == "many ties" else 10
    for n in range(300):
        seed(scripts, JobState.PENDING, job_id(n), T0, priority=0 if n < ties else -1)
    scripts.load()
    cursor = list_jobs(scripts, JobState.PENDING, [DEFAULT], limit=5).next_cursor
    if cursor_at != "its entry":
        r.zrem(K.pending, parse_cursor(cursor).member)

    counts = commands_of(
        r, lambda: r.evalsha(*_page_call(scripts, JobState.PENDING, 100, cursor=cursor))
    )

    # The page itself: a ZRANGE, and a ZCARD since it is full.
    page = Counter({"zrange": 1, "zcard": 1})
    assert counts == page + Counter(commands)


def test_a_page_is_its_script_calls_and_the_jobs_reads_nothing_more(
    r: redis.Redis, scripts: Scripts
) -> None:
    for n in range(3):
        seed(scripts, JobState.DEAD, job_id(n), T0 + n, queue=("a", "b", "c")[n])
    scripts.load()

    counts = commands_of(r, lambda: list_jobs(scripts, JobState.DEAD, ["a", "b", "c"], limit=2))

    # No SCRIPT EXISTS round trip before the pipeline (redis-py sends one for Script objects).
    assert counts == {"zrange": 3, "hgetall": 2}


def test_a_page_after_redis_lost_its_scripts_loads_them_and_reads_again(
    r: redis.Redis, scripts: Scripts
) -> None:
    seed(scripts, JobState.DEAD, job_id(1), T0)
    r.script_flush()  # what a restart or a failover does to the cache

    assert [j.id for j in list_jobs(scripts, JobState.DEAD, [DEFAULT]).jobs] == [job_id(1)]


def test_pages_are_read_when_redis_is_out_of_memory(r: redis.Redis, scripts: Scripts) -> None:
    for n in range(MANY_TIES):
        seed(scripts, JobState.PENDING, job_id(n), T0)
    first = list_jobs(scripts, JobState.PENDING, [DEFAULT], limit=2)
    # The cursor's job goes, among more ties than are read: the next page needs the probe.
    scripts.cancel(job_id(1), now_ms=T0)
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", 1)
    try:
        second = list_jobs(scripts, JobState.PENDING, [DEFAULT], limit=2, cursor=first.next_cursor)
    finally:
        r.config_set("maxmemory", 0)

    assert [j.id for j in second.jobs] == [job_id(2), job_id(3)]
