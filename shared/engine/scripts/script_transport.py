"""Runs the engine's Lua scripts on one Redis client: EVALSHA, one answer to NOSCRIPT, WAIT.

Every script call goes out as a bare EVALSHA, alone, on a pipeline or in a transaction, on one
Redis or a cluster alike (a cluster routes EVALSHA by its first key; its pipelines cannot load
scripts, so none of ours asks them to). When Redis lost its script cache (SCRIPT FLUSH, a
restart, a failover) a call answers NOSCRIPT, having run nothing; :meth:`ScriptTransport.loaded`
then loads every script and sends the same call once more, and once more again should the
cache empty a second time during that reload. That is the one strategy: no SCRIPT EXISTS round
trip before a call, and nothing but a call that did not run is ever sent twice (a pipeline of
several calls is handed to it only when its calls can be repeated: shared.engine.scripts says which).

Callers name each script's KEYS and ARGV (shared.engine.scripts.script_signature reads the names from the
script's header once, here), so no call site builds a list by position.

Durable mode (``Policy.wait_replicas`` ≥ 1, shared.engine.durable): :meth:`ScriptTransport.run_durable`
follows a write that acknowledges work with WAIT on the same pipeline, and
:meth:`ScriptTransport.confirm_masters` waits on the other masters a cluster write touched;
both report what WAIT answered (``Confirmation``).

Sent now, read later (:meth:`ScriptTransport.begin`): a worker that holds its next job sends a
job's completion and starts the next job before the reply comes (workerd.worker, prefetch).
The call goes out on a connection taken from the pool and kept until :meth:`Sent.reply` reads
it; NOSCRIPT there means it ran nothing, so it is sent again, loaded, as any call is. Only on
one Redis (or a Sentinel's master): a cluster routes by key, so there :meth:`begin` simply
runs the call now. It sends no WAIT: a write that durable mode must confirm goes through
:meth:`ScriptTransport.run_durable` (a worker holds no next job in durable mode).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis

from shared.connect.redis_conn import is_cluster
from shared.engine import durable
from shared.engine.engine_types import Confirmation, Policy
from shared.engine.scripts.group_commit import GroupCommit, GroupedCall
from shared.engine.scripts.script_signature import Signature, parse

T = TypeVar("T")

# Reloads after NOSCRIPT before the error is raised: the cache can empty again while it is
# being reloaded (a second flush or failover), seen in the fault tests; a third is an outage.
RELOADS = 2

# Requests a process's shared calls may have in flight before a call waits for one of them
# (GroupCommit's `at_once`). With 1, a call that found one in flight waited for it even where
# few arrive together: with 4 clients of a two-worker gateway the p50 rose in three sittings of
# four (by up to 0.25 ms) and Redis saved nothing; with 2 it did not rise, and most of the
# saving from 16 clients on stayed (bench/MEASUREMENTS.md, "The gateway's enqueues share Redis
# requests").
AT_ONCE = 2

# Seconds a shared request may spend on reloading the scripts after NOSCRIPT and resending the
# calls that did not run (the wait limit of a call queued behind it counts them).
RELOAD_MARGIN = 2.5


class ScriptTransport:
    """Loads the scripts into Redis and sends their calls; one per Scripts, built after fork."""

    def __init__(
        self, client: redis.Redis, sources: dict[str, str], policy: Policy, durable_marker: str
    ):
        self.redis = client
        self.sources = sources
        self.policy = policy
        self.durable_marker = durable_marker
        self.shas = {
            name: hashlib.sha1(text.encode()).hexdigest() for name, text in sources.items()
        }
        self.signatures: dict[str, Signature] = {
            name: parse(name, text) for name, text in sources.items()
        }
        self._lanes = _Lanes()
        self._group: GroupCommit | None = None

    def share_requests(self) -> None:
        """From now on, send the single calls this process's threads make at the same time
        in shared requests (shared.engine.scripts.group_commit): the gateway's, whose threads
        answer many requests at once. Only on one Redis (or a Sentinel's master): a cluster
        routes each call by its key. Not in durable mode's writes, whose WAIT follows each."""
        if is_cluster(self.redis):
            return
        pool = self.redis.connection_pool
        kwargs = pool.connection_kwargs
        # A request: a connection from the pool, then a connect and a reply (each bounded by
        # these timeouts) twice (the client's one retry), and after a NOSCRIPT the reload and
        # the calls resent alone. A queued call waits for two: the one ahead and its own. Not
        # counted: a connect's handshake, a health check's PING, a Sentinel's lookup of the
        # master; a wait they make run out answers as Redis being slow does (503).
        attempt = (kwargs.get("socket_connect_timeout") or 5.0) + (
            kwargs.get("socket_timeout") or 5.0
        )
        request = (getattr(pool, "timeout", None) or 0.0) + 2 * attempt + RELOAD_MARGIN
        self._group = GroupCommit(
            self._call_alone, self._call_together, 2 * request, at_once=AT_ONCE
        )

    def load(self) -> None:
        """Load every script into Redis now, so a broken script fails start-up, not a job."""
        for text in self.sources.values():
            self.redis.script_load(text)

    def ensure_loaded(self) -> bool:
        """Load the scripts if Redis lacks any (one SCRIPT EXISTS when it has them all).

        Returns whether they were all there already. Readiness probes call this: a Redis
        restart or failover empties the script cache.
        """
        if all(self.redis.script_exists(*self.shas.values())):
            return True
        self.load()
        return False

    def ensure_loaded_on(self, node: Any) -> bool:
        """ensure_loaded on one cluster master (`node`, a redis-py ClusterNode) only."""
        found = self.redis.execute_command("SCRIPT EXISTS", *self.shas.values(), target_nodes=node)
        if all(found):
            return True
        for text in self.sources.values():
            self.redis.execute_command("SCRIPT LOAD", text, target_nodes=node)
        return False

    def run(self, name: str, /, **named: Any) -> Any:
        """Call script `name` with its KEYS and ARGV by name; return its reply."""
        keys, args = self.signatures[name].bind(named)
        return self.call(name, keys, args)

    def queue(self, pipe: Any, name: str, /, **named: Any) -> None:
        """Queue a call of script `name` on `pipe` (run it with :meth:`execute`)."""
        keys, args = self.signatures[name].bind(named)
        self.send(pipe, name, keys, args)

    def call(self, name: str, keys: list[Any], args: list[Any]) -> Any:
        """Send one EVALSHA (KEYS and ARGV already in order); the funnel of single calls. Now,
        or with the calls of this process's other threads (:meth:`share_requests`)."""
        if self._group is not None:
            return self._group.call(name, keys, args)
        return self._now(name, keys, args)

    def _now(self, name: str, keys: list[Any], args: list[Any]) -> Any:
        """Send one EVALSHA now, alone, loading the scripts on NOSCRIPT (see loaded)."""
        sha = self.shas[name]
        return self.loaded(
            lambda: self.redis.execute_command("EVALSHA", sha, len(keys), *keys, *args)
        )

    def _call_alone(self, call: GroupedCall) -> Any:
        return self._now(call.name, call.keys, call.args)

    def _call_together(self, calls: list[GroupedCall]) -> None:
        """Send `calls` in one request on one pooled connection; set each one's reply or error
        (the contract of shared.engine.scripts.group_commit.GroupCommit's `together`).

        Not redis-py's Pipeline: its errors quote the command that raised, arguments (a job's
        payload) and all, into a message the gateway may log. As a single call is, the request
        is sent again once on a connection error (the client's retry), with only the calls
        still unanswered; a call that answered NOSCRIPT ran nothing and is sent again alone,
        the scripts loaded.
        """
        pool = self.redis.connection_pool
        conn = pool.get_connection()
        try:
            conn.retry.call_with_retry(
                lambda: self._exchange(conn, calls), lambda _error: conn.disconnect()
            )
        except BaseException:
            conn.disconnect()  # replies may be left unread: never reuse it
            raise
        finally:
            pool.release(conn)
        unrun = [call for call in calls if isinstance(call.error, redis.exceptions.NoScriptError)]
        if not unrun:
            return
        for call in unrun:  # unanswered again: a failure from here on is theirs too
            call.error, call.replied = None, False
        self.load()
        for call in unrun:
            if call.abandoned:  # its caller gave up meanwhile: it ran nothing, and need not
                call.error, call.replied = _unsent(), True
                continue
            try:
                call.value = self._call_alone(call)
            except redis.exceptions.ResponseError as err:
                call.error = err
            call.replied = True

    def _exchange(self, conn: Any, calls: list[GroupedCall]) -> None:
        """Send the calls Redis has not answered yet in one write; read their replies in order.

        Each call is packed apart: one that cannot be (an argument of a type Redis has no form
        for) fails alone, before anything is written. One whose caller stopped waiting is not
        sent once this write has not gone yet.
        """
        sending, chunks = [], []
        for call in calls:
            if call.replied:
                continue
            if call.abandoned:
                call.error, call.replied = _unsent(), True
                continue
            try:
                packed = conn.pack_command(
                    "EVALSHA", self.shas[call.name], len(call.keys), *call.keys, *call.args
                )
                chunks.append(b"".join(packed))  # a strided memoryview fails here, alone
            except Exception as err:
                call.error, call.replied = err, True
                continue
            sending.append(call)
        if not sending:
            return
        conn.send_packed_command([b"".join(chunks)])  # one write (a list: of one buffer)
        for call in sending:
            try:
                call.value = conn.read_response()
            except redis.exceptions.ResponseError as err:
                call.error = err  # the script's error reply: the connection is sound
            call.replied = True

    def send(self, pipe: Any, name: str, keys: list[Any], args: list[Any]) -> None:
        """Queue one EVALSHA on a pipeline; the funnel of piped calls."""
        pipe.execute_command("EVALSHA", self.shas[name], len(keys), *keys, *args)

    def begin(self, name: str, /, **named: Any) -> Sent:
        """Send script `name` now and return a :class:`Sent` whose :meth:`Sent.reply` reads
        its answer later (see the module's docstring); the call runs at once where it cannot
        be left in flight."""
        keys, args = self.signatures[name].bind(named)
        if is_cluster(self.redis):
            return Sent(self, name, keys, args, None, self.call(name, keys, args))
        return self._send_on_lane(name, keys, args, None)[1]

    def begin_behind(self, command: Sequence[Any], name: str, /, **named: Any) -> tuple[Any, Sent]:
        """Send `command`, then script `name`, in one write; read `command`'s reply now and
        return it with the script's :class:`Sent`, whose reply is read next.

        For a blocking `command` (an idle worker's BLPOP): Redis runs nothing of a blocked
        client's until the command is served, then runs the script in the same turn of its
        event loop, so the script follows what unblocked it without a round trip between them.
        One Redis (or a Sentinel's master) only: a cluster routes each command by its own key.
        """
        if is_cluster(self.redis):
            raise TypeError("begin_behind: one Redis only; a cluster routes each command apart")
        keys, args = self.signatures[name].bind(named)
        return self._send_on_lane(name, keys, args, command)

    def _send_on_lane(
        self, name: str, keys: list[Any], args: list[Any], behind: Sequence[Any] | None
    ) -> tuple[Any, Sent]:
        """Send script `name` on the calling thread's kept connection, after `behind` when
        given (its reply read now and returned, else None), and return the script's Sent."""
        conn = self._lanes.take(self.redis.connection_pool)
        evalsha = ("EVALSHA", self.shas[name], len(keys), *keys, *args)
        first = None
        try:
            if behind is None:
                conn.send_command(*evalsha)
            else:
                conn.send_packed_command(conn.pack_commands([tuple(behind), evalsha]))
                first = conn.read_response()
        except BaseException:
            conn.disconnect()  # half a command, or a reply, may be left: never reuse it
            self.done_with(conn)
            raise
        return first, Sent(self, name, keys, args, conn, None, threading.get_ident())

    def let_go(self) -> None:
        """Give the calling thread's kept connection (see :class:`_Lanes`) back to the pool:
        a thread about to wait for work with a blocking command of its own (a worker's idle
        BLPOP) then takes that one, rather than a second connection."""
        self._lanes.let_go(self.redis.connection_pool)

    def done_with(self, conn: Any, sender: int | None = None) -> None:
        """Take back a connection :meth:`begin` sent on, clean: its reply read in full, or
        disconnected (it connects again when next used). `sender`: the thread that sent on it
        (threading.get_ident), when another may read the reply (a worker's flusher reads a
        held job's completion late): that one gives it to the pool, as it keeps none of its own."""
        pool = self.redis.connection_pool
        if sender is None or sender == threading.get_ident():
            self._lanes.give_back(conn, pool)
        else:
            pool.release(conn)

    def execute(self, build: Callable[[], Any]) -> list[Any]:
        """Execute the pipeline `build()` makes, built anew for each attempt (see loaded)."""
        return self.loaded(lambda: build().execute())

    def loaded(self, attempt: Callable[[], T]) -> T:
        """Return `attempt()`; on NOSCRIPT load the scripts and attempt again (RELOADS times)."""
        for _ in range(RELOADS):
            try:
                return attempt()
            except redis.exceptions.NoScriptError:
                self.load()
        return attempt()

    def run_durable(
        self, name: str, slot_marker: str, /, **named: Any
    ) -> tuple[Any, Confirmation | None]:
        """:meth:`run` a script whose write acknowledges work; in durable mode WAIT for the
        replicas after it, on the same pipeline. Returns the reply and what WAIT answered
        (None when the mode is off: exactly :meth:`run`). `slot_marker`: the marker key of the
        slot the script writes (a cluster's WAIT goes to that slot's master)."""
        keys, args = self.signatures[name].bind(named)
        if not self.policy.wait_replicas:
            return self.call(name, keys, args), None
        return self.loaded(
            lambda: self.write_then_wait(
                name, lambda pipe: self.send(pipe, name, keys, args), slot_marker
            )
        )

    def write_then_wait(
        self, op: str, queue_writes: Callable[[Any], None], slot_marker: str
    ) -> tuple[Any, Confirmation]:
        """Run shared.engine.durable's write and WAIT with this policy; return the first reply.

        One Redis: one pipeline, with the PUBLISH marker. A cluster: one pipeline on the master
        owning `slot_marker`'s slot (every write queued must lie in that slot), whose SET is
        the marker.
        """
        if is_cluster(self.redis):
            writes, confirmation = durable.write_then_wait_in_slot(
                self.redis,  # type: ignore[arg-type]
                queue_writes,
                op=op,
                replicas=self.policy.wait_replicas,
                timeout_ms=self.policy.wait_timeout_ms,
                marker_key=slot_marker,
            )
        else:
            writes, confirmation = durable.write_then_wait(
                self.redis,
                queue_writes,
                op=op,
                replicas=self.policy.wait_replicas,
                timeout_ms=self.policy.wait_timeout_ms,
                marker=self.durable_marker,
            )
        return (writes[0] if writes else None), confirmation

    def confirm_masters(
        self, op: str, confirmation: Confirmation, written: Sequence[str], markers: Sequence[str]
    ) -> Confirmation:
        """On a cluster, WAIT also on the masters of `markers`' slots that own none of the
        `written` ones' (a marker and WAIT each, one master after another); return the weakest
        confirmation of all. One Redis: `confirmation` (its marker covered every write).

        An idempotency key lies in the global slot, often on another master than its job's
        queue: a key lost at that master's failover would let a resend make a second job.
        """
        if not is_cluster(self.redis):
            return confirmation
        cluster: Any = self.redis
        seen = {cluster.get_node_from_key(marker).name for marker in written}
        for marker in markers:
            node = cluster.get_node_from_key(marker).name
            if node in seen:
                continue  # that master's marker and WAIT came after this write too
            seen.add(node)
            _, other = self.write_then_wait(op, lambda pipe: None, marker)
            confirmation = durable.weakest(confirmation, other)
        return confirmation


def _unsent() -> redis.exceptions.TimeoutError:
    """The error of a shared call not sent because its caller had given up waiting."""
    return redis.exceptions.TimeoutError("not sent: its caller stopped waiting")


class Sent:
    """A script call sent and not yet read (:meth:`ScriptTransport.begin`)."""

    __slots__ = ("_args", "_conn", "_keys", "_name", "_sender", "_transport", "_value")

    def __init__(
        self,
        transport: ScriptTransport,
        name: str,
        keys: list[Any],
        args: list[Any],
        conn: Any,
        value: Any,
        sender: int | None = None,
    ) -> None:
        self._transport = transport
        self._name, self._keys, self._args = name, keys, args
        self._conn = conn  # None once read (or when the call ran at once: `value` holds it)
        self._value = value
        self._sender = sender  # the thread that sent on `conn` (threading.get_ident)

    @property
    def pending(self) -> bool:
        """Tell whether the reply is still to be read."""
        return self._conn is not None

    def reply(self) -> Any:
        """Return the call's reply, reading it once (it may wait for it). A connection error
        leaves the call's effect unknown, as any lost reply does: the caller repeats the call
        (the scripts sent this way are repeat-safe). NOSCRIPT ran nothing: the call is made
        again with the scripts loaded."""
        conn = self._conn
        if conn is None:
            return self._value
        self._conn = None
        transport = self._transport
        try:
            self._value = conn.read_response()
        except redis.exceptions.NoScriptError:
            transport.done_with(conn, self._sender)
            transport.load()
            self._value = transport.call(self._name, self._keys, self._args)
            return self._value
        except redis.exceptions.ResponseError:
            # The connection is sound: only the script raised.
            transport.done_with(conn, self._sender)
            raise
        except BaseException:
            conn.disconnect()  # a reply left unread would answer the next command
            transport.done_with(conn, self._sender)
            raise
        transport.done_with(conn, self._sender)
        return self._value


class _Lanes(threading.local):
    """Each thread's own connection for the calls it sends now and reads later.

    A busy worker makes one such call a job. Taking a connection from redis-py's pool and
    giving it back around each cost a quarter of the call's client CPU (bench.job_parts, "a
    worker's call"): the pool's lock and fork checks, a poll of the socket for stray data, its
    event and observability hooks. So a thread keeps
    the connection it last read a reply on and takes it back without the pool while it is
    fresh: given back clean (its reply read in full, or disconnected, to connect again when
    next used) less than :data:`FRESH` seconds ago. An older one goes back through the pool,
    whose checks find a socket Redis closed meanwhile (a restart while the worker idled) and
    connect again before anything is sent, as every connection it hands out gets. A second call
    sent while the first is unread takes another connection from the pool, and gives it back
    there; so does a reply read by another thread (a worker's flusher reading a held job's
    completion late). Never kept across a fork: the child would share the parent's socket.
    """

    def __init__(self) -> None:
        self.conn: Any = None
        self.since = 0.0  # time.monotonic() when `conn` was given back
        self.pid = _pid

    def take(self, pool: Any) -> Any:
        """Return this thread's fresh connection, or one from `pool`."""
        conn = self.conn
        if conn is not None:
            self.conn = None
            if self.pid != _pid:
                pass  # the parent's: leave its socket alone (the pool forgot it at the fork)
            elif time.monotonic() - self.since < FRESH:
                return conn
            else:
                pool.release(conn)
        return pool.get_connection()

    def let_go(self, pool: Any) -> None:
        """Give the kept connection, if any, back to `pool`."""
        conn, self.conn = self.conn, None
        if conn is not None and self.pid == _pid:
            pool.release(conn)

    def give_back(self, conn: Any, pool: Any) -> None:
        """Keep `conn` (clean: nothing left to read on it) for this thread's next call, or give
        it back to `pool` when the thread already keeps one."""
        if self.conn is None:
            self.conn, self.since, self.pid = conn, time.monotonic(), _pid
        else:
            pool.release(conn)


# How long a thread's kept connection is taken back without the pool's checks: a busy worker's
# calls come well within it; one idle longer may have lost its socket to a Redis restart.
FRESH = 1.0

_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)
