"""Concurrent script calls of one process's threads share one Redis request (group commit).

Why: a lone EVALSHA costs Redis about 70 µs on the project's VM, two thirds of it the request
around the script (reading and parsing it, answering, a turn of the event loop: bench.call_cost),
and calls sent together in one request pay that once. A gateway process answers many requests
at once on threads, and most of a request's enqueue call is its Redis round trip: in a probe,
68 % of the gateway's enqueue calls found another of their process in flight with 4 clients,
86 % with 16.

How: a call made while none of its process's is in flight goes out at once, alone, as it would
without this (nothing waits when nothing is in flight). A call made while one is in flight
queues. When the call in flight returns, its thread hands the whole queue to the first call in
it, whose thread sends them all as one pipeline (no MULTI: each stays a script call of its own
and answers its own caller, its error included). So a call waits for at most the one request
ahead of it, and while it waits more calls gather behind it.

The sending is the transport's (shared.engine.scripts.script_transport); this module owns only
who sends what, and when.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from typing import Any

import redis


class GroupedCall:
    """One script call waiting in (or leading) a group: what to send and, once sent, its reply."""

    __slots__ = ("args", "batch", "done", "error", "keys", "name", "ready", "replied", "value")

    def __init__(self, name: str, keys: list[Any], args: list[Any]) -> None:
        self.name, self.keys, self.args = name, keys, args
        self.value: Any = None
        self.error: BaseException | None = None
        self.replied = False  # Redis answered it (value or error): a resend skips it
        self.done = False  # its batch is over: `value` or `error` is final
        # Set on the call its group's queue is handed to: it leads that batch.
        self.batch: list[GroupedCall] | None = None
        # Released (once) when the call is answered or handed a batch to lead.
        self.ready = threading.Lock()
        self.ready.acquire()

    def outcome(self) -> Any:
        """Return the reply, or raise the call's error (a copy when several calls share it: a
        request that failed as a whole fails each call in it, each in its own thread)."""
        if self.error is None:
            return self.value
        if self.replied:
            raise self.error  # its own: the script's error reply
        raise _copied(self.error) from self.error


class GroupCommit:
    """Sends one process's concurrent calls in as few requests as they allow (module docstring).

    `alone(call)` sends one call by itself and returns its reply (or raises); `together(calls)`
    sends several in one request and sets each one's `value` or `error`, raising only what
    should reach the thread that sent them (it is then set on every call still unanswered).
    `wait_limit`: seconds a queued call waits for its turn before it gives up; longer than two
    requests can take (the one ahead and its own), so only a stuck sender reaches it.
    """

    def __init__(
        self,
        alone: Callable[[GroupedCall], Any],
        together: Callable[[list[GroupedCall]], None],
        wait_limit: float,
    ) -> None:
        self._alone = alone
        self._together = together
        self.wait_limit = wait_limit
        self._lock = threading.Lock()
        self._busy = False  # a request of this group is in flight
        self._queue: list[GroupedCall] = []

    def call(self, name: str, keys: list[Any], args: list[Any]) -> Any:
        """Send a call now, or after the request in flight, with every call queued meanwhile."""
        call = GroupedCall(name, keys, args)
        with self._lock:
            leads = not self._busy
            if leads:
                self._busy = True
            else:
                self._queue.append(call)
        if leads:
            try:
                return self._alone(call)
            finally:
                self._pass_on()
        self._await_turn(call)
        if call.batch is not None:
            try:
                self._send(call.batch)
            finally:
                self._pass_on()
        return call.outcome()

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
        effect = "it was not sent" if queued else "its effect is unknown"
        raise redis.exceptions.TimeoutError(
            f"a script call waited {self.wait_limit:g}s for the call ahead of it; {effect}"
        )

    def _send(self, batch: list[GroupedCall]) -> None:
        """Send `batch` (led by its first call) and wake every other call in it."""
        try:
            if len(batch) == 1:
                call = batch[0]
                try:
                    call.value = self._alone(call)
                except Exception as err:
                    call.error = err
            else:
                self._together(batch)
        except BaseException as err:
            for call in batch:
                if not call.replied and call.error is None:
                    call.error = err
            raise
        finally:
            for call in batch[1:]:
                call.done = True
                call.ready.release()

    def _pass_on(self) -> None:
        """After a request: hand the calls queued meanwhile to the first of them, or go idle."""
        with self._lock:
            batch, self._queue = self._queue, []
            if not batch:
                self._busy = False
                return
            batch[0].batch = batch
        batch[0].ready.release()


def _copied(error: BaseException) -> BaseException:
    """Return a fresh instance of `error` (its class and args) to raise in another thread."""
    try:
        return copy.copy(error)
    except Exception:
        return error
