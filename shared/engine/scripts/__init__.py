"""The engine's state transitions: one Lua script each, one typed Python method each.

Scripts live in ``shared/engine/lua/<name>.lua``. ``--- @include "x"`` lines pull in the definitions
of ``lua/includes/x.lua`` the script uses (shared.engine.lua_source), so shared helpers are written
once yet every script stays one atomic unit. Every method takes an optional ``now_ms`` that
overrides Redis's clock (tests).

:class:`Scripts` is one object made of the calls of each domain, all over one transport:

- ``transport``  (shared.engine.scripts.script_transport): loads the scripts and sends every call: EVALSHA,
  the one answer to NOSCRIPT, pipelines and transactions, durable mode's WAIT;
- ``signature``: each script's KEYS and ARGV by name, read from its Lua header, so calls
  pass them by name and a call that drifts from the header fails on first use;
- ``jobs``: claim, renew, complete, fail, cancel while running; ``upkeep``: promote, recover,
  release, trim; ``enqueue``: producing jobs, idempotency keys, the due index; ``operator``: replay,
  cancel, purge; ``queues``: pause, limits, the list of queues; ``schedules``; ``fleet``: the
  hosts' registry; ``reads``: counts, listing pages, throughput.

The results they return are in shared.engine.engine_types (imported from there, only).

Out of memory (``maxmemory`` with ``noeviction``): every script opens with a ``#!lua`` flags line,
so Redis refuses it whole rather than letting it write half its effects. enqueue has no flags:
producers get a clear refusal. Every other script is ``allow-oom``: they move existing jobs
(and trim), so workers keep draining the queue while new work is refused.

Events (docs/EVENTS.md): each transition script appends its own event to the events stream
(one for every queue on one Redis, the queue's own on a Cluster), passed as its ``events`` key,
with ``Policy.events_cap`` as its ``events_cap`` argument; with events off (a cap of 0,
TASKFORGE_EVENTS=off) neither is sent and it writes none. heartbeat.lua always gets the hosts'
stream (``Keys.fleet_events``) and the cap, 0 when off.

Durable mode (``Policy.wait_replicas`` ≥ 1, shared.engine.durable): the writes that acknowledge work
(enqueue, enqueue_many, complete, fail, cancel_running) are followed by WAIT, and their results
carry what it answered (``confirmation``; None when the mode is off, and then nothing is sent).
The callers decide what an unconfirmed write means: a 503, or an outcome left uncounted.
"""

from __future__ import annotations

from shared.engine.scripts.enqueue_scripts import EnqueueCalls, batch_digest
from shared.engine.scripts.fleet_scripts import FleetCalls
from shared.engine.scripts.job_scripts import JobCalls, runnable_arg
from shared.engine.scripts.operator_scripts import TOMBSTONE_TTL_MS, OperatorCalls, requester
from shared.engine.scripts.queue_scripts import QueueCalls
from shared.engine.scripts.read_scripts import ReadCalls
from shared.engine.scripts.schedule_scripts import ScheduleCalls
from shared.engine.scripts.script_base import (
    HASH_TTL_MARGIN_MS,
    SCRIPT_NAMES,
    load_source,
    new_request_id,
)
from shared.engine.scripts.upkeep_scripts import TRIM_ROUNDS, UpkeepCalls

__all__ = [
    "HASH_TTL_MARGIN_MS",
    "SCRIPT_NAMES",
    "TOMBSTONE_TTL_MS",
    "TRIM_ROUNDS",
    "Scripts",
    "batch_digest",
    "load_source",
    "new_request_id",
    "requester",
    "runnable_arg",
]


class Scripts(
    JobCalls,
    UpkeepCalls,
    EnqueueCalls,
    OperatorCalls,
    QueueCalls,
    ScheduleCalls,
    FleetCalls,
    ReadCalls,
):
    """Calls the transition scripts; one instance per process, built after fork.

    ``Scripts(client, keys, policy)``: the calls of every domain over one ScriptTransport
    (``self.transport``). Each domain is a class of its own module; this one only joins them.
    """
