"""systemd's notify protocol (READY=1, STATUS=, STOPPING=1) without extra dependencies."""

from __future__ import annotations

import os
import socket


def notify(message: str) -> bool:
    """Send `message` to $NOTIFY_SOCKET; return False when not under systemd (or on error)."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):  # abstract namespace
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(address)
            sock.sendall(message.encode())
        return True
    except OSError:
        return False  # systemd gone or socket unusable: never fatal to the supervisor
