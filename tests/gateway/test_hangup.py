"""gateway.hangup on real sockets: a hung-up peer is seen at once, an open one never."""

from __future__ import annotations

import socket
import threading
import time

from gateway import hangup


def test_an_open_peer_is_not_gone_and_a_closed_one_is() -> None:
    ours, theirs = socket.socketpair()
    try:
        assert not hangup.client_gone(ours)
        theirs.sendall(b"more bytes")  # data to read is no hang-up
        assert not hangup.client_gone(ours)
        theirs.close()
        assert hangup.client_gone(ours)
    finally:
        ours.close()
    assert hangup.client_gone(ours)  # our own socket closed: nothing to serve either
    assert not hangup.client_gone(None)  # no socket to ask (Flask's test client)


def test_a_sliced_wait_ends_within_a_slice_of_the_hang_up() -> None:
    ours, theirs = socket.socketpair()
    woke = threading.Event()
    try:
        threading.Timer(0.2, theirs.close).start()
        started = time.monotonic()
        assert hangup.sliced_wait(woke.wait, 30.0, ours) is False
        assert time.monotonic() - started < 0.2 + 2 * hangup.POLL_SECONDS
    finally:
        ours.close()


def test_a_sliced_wait_returns_what_it_waited_for() -> None:
    ours, theirs = socket.socketpair()
    woke = threading.Event()
    try:
        threading.Timer(0.1, woke.set).start()
        assert hangup.sliced_wait(woke.wait, 30.0, ours) is True
        assert hangup.sliced_wait(threading.Event().wait, 0.3, ours) is True  # the time ran out
    finally:
        ours.close()
        theirs.close()


def test_a_refused_newcomer_waits_only_for_a_slot_a_gone_client_frees() -> None:
    slots = threading.BoundedSemaphore(1)
    holders = hangup.Holders()
    ours, theirs = socket.socketpair()
    try:
        assert hangup.take_slot(slots, holders)
        holders.add(ours)
        started = time.monotonic()
        assert not hangup.take_slot(slots, holders)  # its client is there: refused at once
        assert time.monotonic() - started < 0.1
        theirs.close()
        threading.Timer(0.1, slots.release).start()  # what the holder does once it notices
        assert hangup.take_slot(slots, holders)
    finally:
        ours.close()
