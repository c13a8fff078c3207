"""A gunicorn worker whose poller reads request heads, so an idle or slow client costs a
socket, never a thread, and never stops the worker from accepting.

gunicorn 23's gthread worker hands each new connection to a thread that reads the request
head blocking, with no deadline (a slowloris client holds a thread for as long as it likes),
and stops polling altogether once ``worker_connections`` are open (gunicorn #3407: idle
sockets alone hang the worker). gunicorn 27 still reads the head blocking after its first
byte. Here the main thread's poller reads each head non-blocking into a buffer:

- a connection that has not sent a complete head within ``head_timeout`` of its accept (or
  of its first byte after a keep-alive wait) is closed, as is a keep-alive connection idle
  for ``keepalive`` seconds;
- a complete head (or a request line over ``limit_request_line``, which gunicorn's parser
  refuses with 400 without reading on) goes to the thread pool with the bytes already read
  pushed back into gunicorn's parser, so the request is served exactly as gthread serves it
  (``environ['gunicorn.socket']`` included); a head over MAX_HEAD_BYTES gets 431 here;
- at ``worker_connections`` open connections, the oldest connection that has not sent a
  complete head is closed to admit the new one (the new one is closed if every connection
  is in a thread): the poller never stops polling;
- each round of events is handled listeners first, then kept-alive connections, then those
  still sending a head, and a new connection's head is read as it is accepted: thousands of
  attackers' connections closing at once do not put a client's request behind them.

Requests in threads (event streams, ``?wait=``) are bounded by the gateway as before.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import os
import queue
import resource
import selectors
import socket
import time
from collections import OrderedDict
from concurrent import futures
from functools import partial
from typing import Any

from gunicorn import util
from gunicorn.workers.gthread import TConn, ThreadWorker

from gateway import worker_signals

log = logging.getLogger(__name__)

HEAD_TIMEOUT = 10.0  # seconds a connection may take to send a complete request head
MAX_HEAD_BYTES = 64 * 1024  # request line + headers; gunicorn's own limits allow ~410 KiB
RECV_BYTES = 16 * 1024  # bytes read per readable event
ACCEPT_BURST = 32  # connections accepted per listener event before polling again: a burst
# holds up every request waiting on this poller (256 at ~30 µs each put ~8 ms on enqueue p99)
EXPIRE_BURST = 32  # late connections closed per step before polling again
# Late head-readers closed per second at most: an attacker's connections opened together
# expire together, and closing thousands at once (each reopened at once) put 20 ms on enqueue
# p99 in those seconds; spread out, the same work costs requests little. Shedding at the cap
# still bounds what waits meanwhile.
EXPIRE_RATE = 400.0
RESERVED_FDS = 256  # descriptors left for Redis connections, logs and files in a worker
NOFILE_CEILING = 1 << 20  # soft limit to aim for when the hard limit is unlimited
SUMMARY_INTERVAL = 60.0  # seconds between logs of connections closed early
HEAD_END = b"\r\n\r\n"


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE toward its hard limit; return (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = NOFILE_CEILING if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return soft, soft
    return soft, target


class HeadReadingWorker(ThreadWorker):
    """gthread, with request heads read by the poller under a deadline and a connection cap."""

    head_timeout = HEAD_TIMEOUT

    @classmethod
    def check_config(cls, cfg: Any, log_: Any) -> None:
        """Refuse TLS in gunicorn; raise the open-files limit in the master (workers inherit)."""
        super().check_config(cfg, log_)
        if cfg.is_ssl:
            # The poller reads raw bytes before any handshake: TLS belongs to a reverse proxy.
            raise SystemExit("gateway.http_worker: terminate TLS in a reverse proxy, not gunicorn")
        before, after = raise_open_files_limit()
        if after != before:
            log.info("open_files_limit_raised", extra={"before": before, "after": after})

    def init_process(self) -> None:
        """Raise the open-files limit, then gthread's set-up (pool, poller) and run()."""
        raise_open_files_limit()  # a no-op after the master's; it matters without check_config
        super().init_process()

    def init_signals(self) -> None:
        """gunicorn's handlers, then the stop signals held since the fork (gunicorn.conf.py's
        pre_fork; gateway.worker_signals): one sent meanwhile is handled now."""
        super().init_signals()
        worker_signals.take_stop_signals()

    def prepare(self) -> None:
        """Make what init_process would (pool, poller, wake-up pipe), for run() in a test."""
        self.tpool = self.get_thread_pool()
        self.poller = selectors.DefaultSelector()
        self.PIPE = os.pipe()
        for fd in self.PIPE:
            util.set_non_blocking(fd)

    def _set_up_tables(self) -> None:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        room = self.worker_connections
        if soft != resource.RLIM_INFINITY and soft - RESERVED_FDS < room:
            room = max(1, soft - RESERVED_FDS)
            log.warning(
                "worker_connections_lowered",
                extra={"worker_connections": self.worker_connections, "open_files": soft},
            )
        self.capacity = room
        self.max_keepalived = room - self.cfg.threads  # gthread's handle_request reads it
        self.futures: set[futures.Future[Any]] = set()  # type: ignore[assignment]
        self._done: queue.SimpleQueue[futures.Future[Any]] = queue.SimpleQueue()
        # Connections waiting in the poller, oldest first: reading a head, or idle between
        # requests. Insertion order is deadline order (one timeout per table). Only the main
        # thread touches them and the poller (gthread's _lock is not needed).
        self._reading: OrderedDict[TConn, float] = OrderedDict()
        self._keep = self._idle = OrderedDict()  # gthread counts _keep against max_keepalived
        self._now = time.monotonic()
        self._expire_tokens, self._expire_refilled = float(EXPIRE_BURST), self._now
        self._closed_early = {"expired": 0, "shed": 0, "refused": 0, "too_large": 0}
        self._next_summary = self._now + SUMMARY_INTERVAL

    def run(self) -> None:
        """Poll listeners and waiting connections until told to stop, then drain the pool."""
        self._set_up_tables()
        for listener in self.sockets:
            listener.setblocking(False)
            # the listener's name may be unavailable during shutdown: take it once, here
            self.poller.register(
                listener, selectors.EVENT_READ, partial(self._accept, listener.getsockname())
            )
        self.poller.register(self.PIPE[0], selectors.EVENT_READ, self._drain_wakeups)
        while self.alive:
            self.notify()
            self.step()
            if not self.is_parent_alive():
                break
        self._shutdown()

    def step(self) -> None:
        """Wait for events (at most until the next deadline), handle them, expire the late."""
        self._now = time.monotonic()
        events = self.poller.select(self._wait_seconds())
        self._now = time.monotonic()  # deadlines count from when a connection was seen
        # New connections and kept-alive clients first: when thousands of connections that
        # never sent a head close at once (an attacker leaving), reading each one's end costs
        # ~30 µs, and a real client's request, readable last, would wait behind them all.
        for key, _ in sorted(events, key=self._order) if len(events) > 1 else events:
            key.data(key.fileobj)
        self._finish_requests()
        self._expire()
        if self._now >= self._next_summary:
            self._log_summary()

    def _order(self, event: tuple[selectors.SelectorKey, int]) -> int:
        """Rank an event: listeners and the wake-up pipe 0, a connection between requests
        (kept alive) 1, one still sending its head 2. Python's sort keeps each rank in order."""
        conn = getattr(event[0].data, "args", (None,))[0]
        if not isinstance(conn, TConn):
            return 0
        return 1 if conn in self._idle else 2

    # --- accepting and shedding -----------------------------------------------------------

    def _accept(self, server: Any, listener: socket.socket) -> None:
        for _ in range(ACCEPT_BURST):
            try:
                sock, client = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE) and self._shed_oldest():
                    continue  # a descriptor is free again
                if exc.errno not in (
                    errno.ECONNABORTED,
                    errno.EMFILE,
                    errno.ENFILE,
                    errno.ENOBUFS,
                    errno.ENOMEM,
                ):
                    raise
                return
            if self.nr_conns >= self.capacity and not self._shed_oldest():
                self._closed_early["refused"] += 1
                util.close(sock)  # every connection is being served: refuse this one fast
                continue
            conn = TConn(self.cfg, sock, client, server)  # non-blocking from here
            conn.head = bytearray()
            self.nr_conns += 1
            self._reading[conn] = self._now
            self.poller.register(sock, selectors.EVENT_READ, partial(self._readable, conn))
            # A client sends its request as it connects: read it now, not a round of events
            # later behind every other connection's (an idle one costs one empty read).
            self._readable(conn, sock)

    def _shed_oldest(self) -> bool:
        """Close the connection that has waited longest without a complete head, if any."""
        oldest = [table for table in (self._reading, self._idle) if table]
        if not oldest:
            return False
        table = min(oldest, key=lambda t: next(iter(t.values())))
        self._drop(next(iter(table)))
        self._closed_early["shed"] += 1
        return True

    # --- reading heads --------------------------------------------------------------------

    def _readable(self, conn: TConn, sock: socket.socket) -> None:
        if conn in self._idle:
            del self._idle[conn]  # a new request begins: its head gets the full deadline
            self._reading[conn] = self._now
        elif conn not in self._reading:
            return  # shed or expired earlier in this round of events: already closed
        try:
            data = sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""  # reset by the client: nothing to answer
        if not data:
            self._drop(conn)
            return
        start = max(0, len(conn.head) - len(HEAD_END) + 1)
        conn.head += data
        if conn.head.find(HEAD_END, start) >= 0 or self._line_too_long(conn.head):
            self._hand_over(conn)
        elif len(conn.head) > MAX_HEAD_BYTES:
            self._closed_early["too_large"] += 1
            util.write_error(
                sock, 431, "Request Header Fields Too Large", f"over {MAX_HEAD_BYTES} bytes"
            )
            self._drop(conn)

    def _line_too_long(self, head: bytearray) -> bool:
        """Say whether gunicorn's parser would refuse this request line without reading on."""
        limit = self.cfg.limit_request_line
        return limit > 0 and len(head) > limit + 2 and head.find(b"\r\n", 0, limit + 2) < 0

    def _hand_over(self, conn: TConn) -> None:
        """Give a connection with a complete head to a thread; its bytes go to the parser."""
        self.poller.unregister(conn.sock)
        del self._reading[conn]
        head, conn.head = bytes(conn.head), bytearray()
        conn.init()  # blocking socket; gunicorn's parser, made once per connection
        conn.parser.unreader.unread(head)
        fut = self.tpool.submit(self.handle, conn)
        fut.conn = conn  # type: ignore[attr-defined]
        self.futures.add(fut)
        fut.add_done_callback(self._request_done)

    # --- after a request ------------------------------------------------------------------

    def _request_done(self, fut: futures.Future[Any]) -> None:
        """Runs on the pool's thread: queue the connection for the main thread and wake it."""
        self._done.put(fut)
        with contextlib.suppress(OSError):  # full: the main thread is about to wake anyway
            os.write(self.PIPE[1], b".")

    def _drain_wakeups(self, fd: int) -> None:
        try:
            while os.read(fd, 4096):
                pass
        except OSError:
            pass

    def _finish_requests(self) -> None:
        while True:
            try:
                fut = self._done.get_nowait()
            except queue.Empty:
                return
            self.futures.discard(fut)
            conn = fut.conn  # type: ignore[attr-defined]
            keep = not fut.cancelled() and fut.exception() is None and fut.result()[0]
            if not (keep and self.alive):
                self._close(conn)
                continue
            try:
                conn.sock.setblocking(False)
                self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._readable, conn))
            except (OSError, ValueError):
                self._close(conn)  # the request's thread closed the socket
                continue
            # Bytes the parser read past the request (a pipelined next one) would never make
            # the socket readable again: take them back, and serve them if they are a head.
            unreader = conn.parser.unreader
            conn.head = bytearray(unreader.buf.getvalue())
            unreader.buf = io.BytesIO()
            if not conn.head:
                self._idle[conn] = self._now
            elif conn.head.find(HEAD_END) >= 0 or self._line_too_long(conn.head):
                self._reading[conn] = self._now
                self._hand_over(conn)
            else:
                self._reading[conn] = self._now

    # --- deadlines and closing ------------------------------------------------------------

    def _wait_seconds(self) -> float:
        deadlines = [1.0]
        if self._reading:
            late_in = next(iter(self._reading.values())) + self.head_timeout - self._now
            if late_in <= 0 and self._expire_tokens < 1:
                late_in = (1 - self._expire_tokens) / EXPIRE_RATE  # the next close allowed
            deadlines.append(late_in)
        if self._idle:
            deadlines.append(next(iter(self._idle.values())) + self.cfg.keepalive - self._now)
        return max(0.0, min(deadlines))

    def _expire(self) -> None:
        elapsed = self._now - self._expire_refilled
        self._expire_refilled = self._now
        self._expire_tokens = min(EXPIRE_BURST, self._expire_tokens + elapsed * EXPIRE_RATE)
        for table, timeout, counted in (
            (self._reading, self.head_timeout, True),
            (self._idle, self.cfg.keepalive, False),  # keep-alive ending is not abuse
        ):
            # In bursts: thousands opened together expire together, and closing them all
            # in one go would keep new connections waiting in the listen queue meanwhile.
            # Head-readers also at EXPIRE_RATE (above); an idle keep-alive costs no reopen.
            allowed = int(self._expire_tokens) if counted else EXPIRE_BURST
            for _ in range(allowed):
                if not table:
                    break
                conn, since = next(iter(table.items()))
                if since + timeout > self._now:
                    break
                self._drop(conn)
                self._closed_early["expired"] += counted
                self._expire_tokens -= counted

    def _drop(self, conn: TConn) -> None:
        """Close a connection waiting in the poller."""
        self._reading.pop(conn, None)
        self._idle.pop(conn, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(conn.sock)
        self._close(conn)

    def _close(self, conn: TConn) -> None:
        self.nr_conns -= 1
        conn.close()

    def _log_summary(self) -> None:
        self._next_summary = self._now + SUMMARY_INTERVAL
        if any(self._closed_early.values()):
            # Once a minute at most: a flood must not become a flood of log lines.
            log.warning(
                "connections_closed_early", extra={**self._closed_early, "open": self.nr_conns}
            )
            self._closed_early = dict.fromkeys(self._closed_early, 0)

    def _shutdown(self) -> None:
        self.tpool.shutdown(False)
        for conn in [*self._reading, *self._idle]:
            self._drop(conn)
        for listener in self.sockets:
            self.poller.unregister(listener)
            listener.close()
        self.poller.close()
        futures.wait(self.futures, timeout=self.cfg.graceful_timeout)
