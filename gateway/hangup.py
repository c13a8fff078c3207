"""Noticing that a client hung up while its request waits (an event stream, a ``?wait=``).

A stream or a wait holds a slot (TASKFORGE_EVENTS_STREAMS) and a thread while it sleeps on the
event tail. A write would tell that its client has gone, but a stream writes only every
keep-alive (15 s) and a wait only at its end (up to 60 s): 128 clients that open and close a
stream would take every slot that long. So a sleeper wakes every POLL_SECONDS and asks the
kernel, with a zero-timeout poll of its socket (``environ['gunicorn.socket']``), whether the
peer closed: no Redis call, no read of the client's bytes. A newcomer refused a slot looks at
the holders' sockets the same way and, if one has gone, waits the moment its holder needs to
notice and free it, rather than answering 503.
"""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Callable

POLL_SECONDS = 0.25  # how often a sleeping stream or wait looks at its socket
# A newcomer waits this long for a slot that a gone client's holder is about to free: the
# holder notices within POLL_SECONDS, then its response closes.
FREEING_SECONDS = 1.0
# The peer closed (FIN: POLLRDHUP), reset (POLLHUP, POLLERR), or the socket is closed (POLLNVAL).
_GONE = select.POLLHUP | select.POLLERR | select.POLLNVAL | getattr(select, "POLLRDHUP", 0)


def client_gone(sock: socket.socket | None) -> bool:
    """Tell whether the peer of `sock` hung up (never for None: no socket to ask, a test)."""
    if sock is None:
        return False
    try:
        fd = sock.fileno()
    except OSError:
        return True
    if fd < 0:
        return True
    poller = select.poll()
    poller.register(fd, _GONE)
    return any(mask & _GONE for _, mask in poller.poll(0))


class Holders:
    """The sockets of the requests that hold a slot, for a refused newcomer to look at."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: dict[int, socket.socket] = {}

    def add(self, sock: socket.socket | None) -> None:
        """Count `sock`'s request as a holder."""
        if sock is not None:
            with self._lock:
                self._sockets[id(sock)] = sock

    def discard(self, sock: socket.socket | None) -> None:
        """Forget `sock` (its request freed its slot)."""
        if sock is not None:
            with self._lock:
                self._sockets.pop(id(sock), None)

    def any_gone(self) -> bool:
        """Tell whether some holder's client hung up (its slot frees within POLL_SECONDS)."""
        with self._lock:
            sockets = list(self._sockets.values())
        return any(client_gone(sock) for sock in sockets)


def take_slot(slots: threading.BoundedSemaphore, holders: Holders) -> bool:
    """Take a slot; when none is free, wait for one only if a holder's client has gone."""
    if slots.acquire(blocking=False):
        return True
    return holders.any_gone() and slots.acquire(timeout=FREEING_SECONDS)


def sliced_wait(
    wait: Callable[[float], object], timeout: float, sock: socket.socket | None
) -> bool:
    """Call `wait(seconds)` for up to `timeout` s in POLL_SECONDS slices; False if the client
    hung up meanwhile (`wait` returns true when what it waits for came)."""
    remaining = timeout
    while True:
        if client_gone(sock):
            return False
        if sock is None:
            wait(max(remaining, 0.0))
            return True
        step = min(POLL_SECONDS, max(remaining, 0.0))
        if wait(step) or remaining <= POLL_SECONDS:
            return True
        remaining -= step
