"""No script call reads keys of two slots: checked at every call site, and on a real cluster.

The design says each script touches one queue's slot or the global one, never both. Three
checks hold it: (1) every script call of shared.engine.scripts goes through the funnels that
tests.support.slots guards (read from the source), (2) the engine tests run with that guard,
and (3) here, every script in SCRIPT_NAMES is called through the guarded engine on a real
cluster, where redis-py and Redis would refuse a cross-slot call anyway.
"""

from __future__ import annotations

import ast
import json
import uuid
from collections.abc import Iterator

import pytest

from shared.connect.redis_conn import connect
from shared.engine.engine_types import Code, Policy
from shared.engine.keys import Keys
from shared.engine.scripts import SCRIPT_NAMES, Scripts
from shared.model.jobs import JobState, validate_enqueue
from shared.read import listing, throughput
from shared.settings.config import Settings
from tests.support import slots
from tests.support.cluster import RedisCluster, queue_names_on_distinct_masters
from tests.support.tools import ROOT

# The transport's funnels: every EVALSHA goes out through one of them (`_send_on_lane` sends
# for begin, which runs a call through `call` on a cluster, where the slot guard looks, and
# for begin_behind, which refuses a cluster). `_now` sends what `call` sends alone, and
# `_exchange` what `call` hands its group (share_requests), so the guard on `call` has seen
# each first.
FUNNELS = {"send", "_send_on_lane", "_now", "_exchange"}
# The calls by name (each binds a script's KEYS and ARGV, then goes through a funnel), and the
# methods that take a script's name and pass it on to one of those.
NAMED_CALLERS = {"run", "queue", "run_durable", "_each", "_toggle"}
SCRIPTS_DIR = ROOT / "shared" / "engine" / "scripts"


def _trees() -> dict[str, ast.Module]:
    return {path.name: ast.parse(path.read_text()) for path in SCRIPTS_DIR.glob("*.py")}


def _in_functions() -> Iterator[tuple[str, str, ast.AST]]:
    """Yield (file, function, node) for every node inside a function of the scripts package."""
    for name, tree in _trees().items():
        for func in ast.walk(tree):
            if isinstance(func, ast.FunctionDef):
                for node in ast.walk(func):
                    yield name, func.name, node


def test_only_the_transport_funnels_send_evalsha() -> None:
    """EVALSHA appears only in the transport's funnels, so the guard sees every call."""
    senders = {
        (name, func)
        for name, func, node in _in_functions()
        if isinstance(node, ast.Constant) and node.value == "EVALSHA"
    }
    assert senders == {("script_transport.py", funnel) for funnel in FUNNELS}, senders


def test_the_group_senders_are_reached_only_through_the_group_that_call_feeds() -> None:
    """`_call_alone` and `_exchange` are named only where share_requests hands them to the
    group (and where the group's request runs), and `_now` only by `call` and `_call_alone`,
    so no call site reaches them but by `call`."""
    users = {
        (name, func, node.attr)
        for name, func, node in _in_functions()
        if isinstance(node, ast.Attribute) and node.attr in {"_call_alone", "_exchange", "_now"}
    }
    assert users == {
        ("script_transport.py", "share_requests", "_call_alone"),
        ("script_transport.py", "_call_together", "_call_alone"),
        ("script_transport.py", "_call_together", "_exchange"),
        ("script_transport.py", "call", "_now"),
        ("script_transport.py", "_call_alone", "_now"),
    }, users


def test_every_script_name_at_a_call_site_is_a_known_script() -> None:
    named = set()
    for name, tree in _trees().items():
        if name == "script_transport.py":
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in NAMED_CALLERS
            ):
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        named.add(arg.value)
    assert named == set(SCRIPT_NAMES), set(SCRIPT_NAMES) ^ named


@pytest.fixture
def engine(cluster: RedisCluster) -> Scripts:
    settings = Settings.from_env({"REDIS_URL": f"redis+cluster://{cluster.seeds}"})
    scripts = slots.one_slot(Scripts(connect(settings, role="slots"), Keys(), Policy()))
    scripts.load()
    return scripts


def test_every_script_runs_on_a_real_cluster_with_one_slot_per_call(
    cluster: RedisCluster, engine: Scripts
) -> None:
    before = slots.CALLED.copy()
    a, b, c = queue_names_on_distinct_masters(cluster)
    for queue in (a, b, c):
        engine.register_queue(queue)

    def request(queue: str, job_type: str = "t", **fields: object):
        return validate_enqueue({"type": job_type, "queue": queue, **fields})

    ids = [str(uuid.uuid4()) for _ in range(8)]
    engine.enqueue(request(a), ids[0], idempotency_key="one")  # reserve + enqueue
    engine.enqueue_many(
        [(request(q), i) for q, i in zip((a, b, c), ids[1:4], strict=True)],
        idempotency_key="batch",  # reserve_batch
    )
    job = engine.claim("w1", queue=a)  # claim
    assert job is not None and job.token is not None
    engine.renew([(job.id, job.token)], queue=a)  # renew
    engine.complete(job.id, job.token, "1", claim_next_for="w1", queue=a)  # complete (+claim)
    engine.enqueue(request(a), ids[6])
    batch = engine.claim_batch("w9", 2, queue=a)  # claim_batch
    assert isinstance(batch, list) and [j.id for j in batch] == [ids[6]]
    done = [(batch[0].id, batch[0].token, "1")]
    assert engine.complete_batch("w9", done, count=2, queue=a).acks[0].code is Code.DONE
    failing = engine.claim("w1", queue=b)
    assert failing is not None
    engine.fail(failing.id, failing.token, "boom", permanent=True, queue=b)  # fail: dead
    engine.replay(failing.id, queue=b)  # replay
    again = engine.claim("w1", queue=b)
    assert again is not None
    engine.fail(again.id, again.token, "boom", permanent=True, queue=b)
    engine.purge(again.id, queue=b)  # purge
    running = engine.claim("w2", queue=c)
    assert running is not None
    engine.release(running.id, running.token, queue=c)  # release
    running = engine.claim("w2", queue=c)
    assert running is not None
    # release_worker, one call per queue
    engine.release_worker("w2", running=running.id, queues=(a, b, c))
    running = engine.claim("w3", queue=c)
    assert running is not None
    engine.cancel_running(running.id, running.token, "SIGTERM", queue=c)  # cancel_running
    engine.enqueue(request(a, delay="1h"), ids[4])
    engine.cancel(ids[4], queue=a)  # cancel
    engine.enqueue(request(b, delay=0.001), ids[5])
    for queue in (a, b, c):
        engine.promote(queue=queue)  # promote
        engine.recover(queue=queue)  # recover
        engine.trim(queue=queue)  # trim
    engine.set_limits(c, json.dumps({"rate": {"limit": 1, "per_ms": 60_000}}))  # set_limits
    engine.open_gates(queue=c)  # open_gates
    engine.pause_queue(a)  # pause_queue
    engine.resume_queue(a)  # resume_queue
    engine.heartbeat("host-1", {"host": "h", "pid": 1}, 10_000)  # heartbeat
    engine.quiet_host("host-1", True)  # quiet_host
    engine.stats([a, b, c])  # queue_stats per queue + fleet
    listing.list_jobs(engine, JobState.COMPLETED, [a, b, c])  # list_page per queue
    throughput.last_hour(engine, [a, b, c])  # throughput per queue
    engine.publish_schedules([("nightly", json.dumps({"every": "1h"}))])  # publish_schedules
    engine.advance_schedule("nightly", 3_600_000, None)  # advance_schedule
    engine.pause_schedule("nightly")  # pause_schedule
    engine.resume_schedule("nightly")  # resume_schedule
    spare = "spare"
    engine.register_queue(spare)
    assert engine.delete_queue(spare) is None  # delete_queue, in the queue's slot
    engine.unregister_queue(spare)  # the list and the tag map, in the global slot
    called = {name for name, count in (slots.CALLED - before).items() if count}
    assert set(SCRIPT_NAMES) <= called, set(SCRIPT_NAMES) - called


def test_the_guard_refuses_keys_of_two_queues() -> None:
    keys = [Keys().for_queue("a").pending, Keys().for_queue("b").pending]
    with pytest.raises(slots.CrossSlot):
        slots.check_keys("claim", keys)
