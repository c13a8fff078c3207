"""What every benchmark task body does, in every system: append one fixed-width line.

The line holds three wall-clock times: when the producer sent the job (0 for drain jobs),
when the task body started and when it ended. Each process (and thread) appends to its own
file in ``$BENCH_STAMP_DIR`` with one ``write`` call: no Redis round trip, so the measuring
adds nothing to the system measured, and the controller learns how many jobs ran from the
files' sizes alone. This module imports nothing but the standard library: it runs inside
every peer's virtualenv.

``body(sent)`` is the whole task body of every system. With ``BENCH_IO_WAIT_MS`` > 0 it is
I/O-bound: one Redis round trip (``GET bench:io`` on the benchmark's Redis, over a raw socket
per process and thread, so every system pays the same client cost) and then a wait of that
many milliseconds, as a job calling a slow service would; 0 (the default) is the no-op body.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import urllib.parse

LINE = 54  # bytes per record: three 17-character fields, two spaces, a newline
_files = threading.local()
_conns = threading.local()
IO_GET = b"*2\r\n$3\r\nGET\r\n$8\r\nbench:io\r\n"


def io_wait_seconds() -> float:
    """Return the I/O body's wait (BENCH_IO_WAIT_MS, in ms) in seconds; 0 for the no-op body."""
    return float(os.environ.get("BENCH_IO_WAIT_MS") or 0) / 1000


def body(sent: float, io_wait: float | None = None) -> None:
    """The benchmark task body: optional I/O (a round trip, then a wait), then the record."""
    started = time.time()
    wait = io_wait_seconds() if io_wait is None else io_wait
    if wait > 0:
        redis_round_trip()
        time.sleep(wait)
    record(sent, started)


def redis_round_trip() -> bytes:
    """Send one GET to the benchmark's Redis and return its whole reply (nil: b"$-1\\r\\n")."""
    conn = getattr(_conns, "sock", None)
    where = (os.getpid(), redis_url())
    if conn is None or _conns.where != where:
        if conn is not None and _conns.where[0] == os.getpid():
            conn.close()  # a forked child leaves its parent's socket alone
        url = urllib.parse.urlsplit(where[1])
        conn = socket.create_connection((url.hostname or "127.0.0.1", url.port or 6379), 10)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _conns.sock, _conns.where = conn, where
    conn.sendall(IO_GET)
    reply = b""
    while not reply.endswith(b"\r\n"):
        chunk = conn.recv(4096)
        if not chunk:
            raise ConnectionError("Redis closed the benchmark's I/O connection")
        reply += chunk
    if reply.startswith(b"-"):
        raise RuntimeError(f"Redis answered the I/O body's GET with {reply!r}")
    return reply


def record(sent: float, started: float) -> None:
    """Append (sent, started, now) to this thread's stamp file."""
    fd = getattr(_files, "fd", None)
    # Keyed by directory too: one process (a test) may record into several directories.
    where = (os.getpid(), os.environ["BENCH_STAMP_DIR"])
    if fd is None or _files.where != where:
        if fd is not None:
            os.close(fd)
        name = f"{os.getpid()}-{threading.get_ident()}"
        fd = os.open(os.path.join(where[1], name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        _files.fd, _files.where = fd, where
    os.write(fd, b"%17.6f %17.6f %17.6f\n" % (sent, started, time.time()))


def redis_url() -> str:
    """Return the benchmark's private Redis URL; refuse to fall back to any default Redis."""
    url = os.environ.get("BENCH_REDIS_URL")
    if not url:
        raise SystemExit("BENCH_REDIS_URL is not set: refusing to use a default Redis")
    return url
