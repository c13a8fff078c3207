"""Concurrent script calls of one process's threads share one Redis request (group commit).

Why: a lone EVALSHA costs Redis about 70 µs on the project's VM, two thirds of it the request
around the script (reading and parsing it, answering, a turn of the event loop: bench.call_cost),
and calls sent together in one request pay that once. A gateway process answers many requests
at once on threads, and most of a request's enqueue call is its Redis round trip: in a probe,
68 % of the gateway's enqueue calls found another of their process in flight with 4 clients,
86 % with 16.

How: a call made while fewer than `at_once` requests of its process are in flight goes out
at once, alone, as it would without this. A call made while `at_once` are in flight queues.
When one of them returns, its thread hands its place, with the whole queue, to the first call
queued, whose thread sends them all as one pipelined request (no MULTI: each stays a script
call of its own and answers its own caller, its error included). So a call waits for at most
the one request ahead of it, and while it waits more calls gather behind it. The transport
lets two be in flight (script_transport.AT_ONCE, and why).

The sending is the transport's (shared.engine.scripts.script_transport); this module owns only
who sends what, and when.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

import redis

# A request's failures that say Redis did not answer it (after the client's retry), as opposed
# to a script's error reply, which is its call's own.
UNREACHABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


class GroupedCall:
    """One script call waiting in (or leading) a group: what to send and, once sent, its reply."""

    __slots__ = (
        "abandoned",
        "args",
        "batch",
        "done",
        "error",
        "holds",
        "keys",
        "name",
        "ready",
        "replied",
        "shared",
        "unreachable",
        "value",
    )

    def __init__(self, name: str, keys: list[Any], args: list[Any]) -> None:
        self.name, self.keys, self.args = name, keys, args
        self.value: Any = None
        self.error: BaseException | None = None
        # Redis answered it (`value`, or its own error reply in `error`): never sent again.
        self.replied = False
        self.shared = False  # `error` is the whole request's failure, shared by its calls
        self.done = False  # its batch is over: `value` or `error` is final
        # Its caller stopped waiting: not sent if its request has not been written yet.
        self.abandoned = False
        # Set on the call its group's queue is handed to: it leads that batch.
        self.batch: list[GroupedCall] | None = None
        # It holds one of the group's places in flight (it leads, alone or a batch), which
        # it hands on exactly once (GroupCommit._pass_on).
        self.holds = False
        # Its request found Redis unreachable or too slow (a connection error or a timeout,
        # after the client's retry): the calls queued behind it are not sent after it.
        self.unreachable = False
        # Released (once) when the call is answered or handed a batch to lead.
        self.ready = threading.Lock()
        self.ready.acquire()

    def outcome(self) -> Any:
        """Return the reply, or raise the call's error (a copy of a shared one: each thread that
        raises it gets an exception of its own)."""
        if self.error is None:
            return self.value
        if self.shared:
            copied = _copied(self.error)
            if copied is not self.error:
                raise copied from self.error
        raise self.error


class GroupCommit:
    """Sends one process's concurrent calls in as few requests as they allow (module docstring).

    `alone(call)` sends one call by itself and returns its reply (or raises). `together(calls)`
    sends several in one request: it sets `value`, or its own error reply as `error`, on each
    call Redis answered, marking it `replied`, and skips any `abandoned` before it is written;
    it raises when the request failed as a whole, which then fails every call not answered.
    `wait_limit`: seconds a queued call waits for its turn before it gives up; longer than two
    requests can take (the one ahead and its own), so only a stuck sender reaches it.
    """

    def __init__(
        self,
        alone: Callable[[GroupedCall], Any],
        together: Callable[[list[GroupedCall]], None],
        wait_limit: float,
        at_once: int = 1,
    ) -> None:
        if at_once < 1:
            raise ValueError("at_once: at least one request must be allowed in flight")
        self._alone = alone
        self._together = together
        self.wait_limit = wait_limit
        self.at_once = at_once
        self._lock = threading.Lock()
        self._in_flight = 0  # requests of this group in flight, at most `at_once`
        self._queue: list[GroupedCall] = []

    def call(self, name: str, keys: list[Any], args: list[Any]) -> Any:
        """Send a call now, or after a request in flight, with every call queued meanwhile."""
        call = GroupedCall(name, keys, args)
        try:
            with self._lock:
                if self._in_flight < self.at_once:
                    call.holds = True
                    self._in_flight += 1
                else:
                    self._queue.append(call)
            if call.holds:
                return self._alone(call)
            self._await_turn(call)
            if call.batch is not None:
                self._send(call.batch)
            return call.outcome()
        except BaseException as err:
            call.unreachable = isinstance(err, UNREACHABLE)
            self._stop_waiting(call)
            raise
        finally:
            self._pass_on(call)

    def _await_turn(self, call: GroupedCall) -> None:
        """Wait until `call` is answered or leads a batch; give up after wait_limit."""
        if call.ready.acquire(timeout=self.wait_limit):
            return
        with self._lock:
            if call.batch is not None or call.done:
                return  # its turn came as the wait ran out
            queued = call in self._queue
            if queued:
                self._queue.remove(call)
            else:
                call.abandoned = True  # in a request being sent: maybe written already
        effect = "it was not sent" if queued else "its effect is unknown"
        raise redis.exceptions.TimeoutError(
            f"a script call waited {self.wait_limit:g}s for the call ahead of it; {effect}"
        )

    def _stop_waiting(self, call: GroupedCall) -> None:
        """Leave the group as `call`'s thread raises: out of the queue, or (handed a batch it
        did not send: a signal handler's exception in a main thread) failing that batch's
        other calls unsent. Nothing to do once its turn is over, or its wait already gave up."""
        with self._lock:
            if call.batch is None:
                if call in self._queue:
                    self._queue.remove(call)
                return
            unsent = [other for other in call.batch[1:] if not other.done]
        # _send finishes every call of its batch, even when interrupted: these it never began.
        self._finish(
            unsent,
            redis.exceptions.ConnectionError(
                "a script call was not sent: the thread that was to send it stopped"
            ),
        )

    def _send(self, batch: list[GroupedCall]) -> None:
        """Send `batch` (led by its first call) and wake every other call in it."""
        try:
            if len(batch) == 1:
                lead = batch[0]
                try:
                    lead.value = self._alone(lead)
                except Exception as err:
                    lead.error = err  # its own, raised in the thread that got it
                    lead.unreachable = isinstance(err, UNREACHABLE)
            else:
                try:
                    self._together(batch)
                except Exception as err:
                    self._fail_unanswered(batch, err)
                    batch[0].unreachable = isinstance(err, UNREACHABLE)
        except BaseException:
            # The sending thread itself is stopping (SystemExit, KeyboardInterrupt): the calls
            # it sent for others learn that their effect is unknown, not its exception.
            stopped = redis.exceptions.ConnectionError(
                "the thread sending this script call stopped; its effect is unknown"
            )
            self._fail_unanswered(batch[1:], stopped)
            raise
        finally:
            self._finish(batch[1:], None)

    @staticmethod
    def _fail_unanswered(calls: list[GroupedCall], error: BaseException) -> None:
        for call in calls:
            if not call.replied:
                call.error, call.shared = error, True

    @staticmethod
    def _finish(calls: list[GroupedCall], error: BaseException | None) -> None:
        """Mark `calls` final (failing them with `error` first, if given) and wake them."""
        for call in calls:
            if error is not None:
                call.error, call.shared = error, True
            call.done = True
            call.ready.release()

    def _pass_on(self, holder: GroupedCall) -> None:
        """After `holder`'s request (if it holds a place in flight: else nothing): hand the
        place, with the calls queued meanwhile, to the first of them; or give it up."""
        with self._lock:
            if not holder.holds:
                return
            holder.holds = False
            batch, self._queue = self._queue, []
            if not batch or holder.unreachable:
                self._in_flight -= 1
            else:
                batch[0].batch, batch[0].holds = batch, True
        if batch and holder.unreachable:
            # Redis did not answer the request ahead: sent now, these would wait for it a whole
            # timeout more. They fail at once, unsent (a 503 to resend, as fast as the one
            # ahead); a call made after this goes by itself again, and finds Redis back or not.
            self._finish(
                batch,
                redis.exceptions.ConnectionError(
                    "a script call was not sent: the request ahead of it found Redis "
                    "unreachable or too slow"
                ),
            )
            return
        if batch:
            batch[0].ready.release()


def _copied(error: BaseException) -> BaseException:
    """Return a fresh instance of `error` (its class and args) to raise in another thread."""
    try:
        return copy.copy(error)
    except Exception:
        return error
