"""A small threaded TCP proxy that injects network faults between a client and a server.

    with TcpProxy("127.0.0.1", redis_port) as proxy:
        client = redis.Redis(host=proxy.host, port=proxy.port)
        lost = proxy.drop_next_reply(b"EVALSHA")
        client.evalsha(...)        # runs on the server; its reply never reaches the client
        assert lost.is_set()

``connections`` counts the client connections open now, ``peak_connections`` the most ever open
at once. Controls (each takes effect on open connections and on new ones):

- ``pause()`` / ``resume()``: stop forwarding in both directions; bytes read meanwhile are held
  and delivered, in order, on resume. Connections are still accepted while paused.
- ``reset_all()``: abort every open connection (RST to both ends); later ones work normally.
- ``set_latency(seconds)``: hold every chunk the server sends that long before forwarding it,
  so each request/reply round trip gains ``seconds``.
- ``drop_next_reply(match)``: forward the next client request whose bytes contain ``match`` to
  the server, then swallow the server's reply and close that client connection. The client
  sees a connection error *after* the command ran. Meant for clients that send one command
  at a time and wait for its reply (redis-py outside pipelines): the first reply bytes after
  the matching request are that request's.

Every thread is a daemon and ``stop()`` joins them all with a timeout.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable
from types import TracebackType

CHUNK = 65536
CONNECT_TIMEOUT = 5.0  # seconds to reach the target for each accepted client
# A request may arrive split across reads: keep this many of its last bytes to find a match
# that straddles two reads. Longer patterns are refused.
MAX_MATCH = 4096


class _Link:
    """One client connection and the upstream connection that serves it."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.closed = False
        # Set by the request pump, under the proxy's lock, before the matching request is
        # forwarded: the reply pump then swallows the reply and sets the event.
        self.lose_reply: threading.Event | None = None
        self._lock = threading.Lock()

    def close(self, *, reset: bool = False) -> None:
        """Close both sockets (idempotent); with ``reset``, abort them with an RST."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
        for sock in (self.client, self.upstream):
            try:
                if reset:
                    # Linger 0: close() sends RST, not FIN. SHUT_RD wakes a pump blocked in
                    # recv on this socket (close alone does not) without sending anything.
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    sock.shutdown(socket.SHUT_RD)
                else:
                    sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # the peer may have gone already
            sock.close()


class TcpProxy:
    """Forwards TCP connections from a free port on ``listen_host`` to ``target``."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,  # 0: a free one; a test may name a port a client already tries
    ) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server((listen_host, listen_port))
        self.host, self.port = self._listener.getsockname()[:2]
        # One condition guards every field below and wakes pumps waiting on pause or latency.
        self._cond = threading.Condition()
        self._paused = False
        self._latency = 0.0
        self._stopping = False
        self._armed: tuple[bytes, threading.Event, int] | None = None
        self._links: set[_Link] = set()
        self._peak = 0  # the most client connections ever open at once
        self._threads: list[threading.Thread] = []
        self._accepter: threading.Thread | None = None

    # -- life cycle ------------------------------------------------------------------------

    def start(self) -> TcpProxy:
        """Start accepting connections; return self."""
        if self._accepter is not None:
            raise RuntimeError("proxy already started")
        self._accepter = self._spawn(self._accept_loop, "accept")
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, close every connection and join every thread (raise if one hangs)."""
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._cond.notify_all()
        # shutdown() wakes a thread blocked in accept(); close() alone does not on Linux.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        deadline = time.monotonic() + timeout
        # The accept thread is the only one that starts others: once it is gone, the lists
        # below are complete.
        if self._accepter is not None:
            self._accepter.join(timeout)
        with self._cond:
            links, threads = list(self._links), list(self._threads)
        for link in links:
            link.close()
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            raise RuntimeError(f"proxy threads did not stop within {timeout}s: {stuck}")

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- controls ----------------------------------------------------------------------------

    @property
    def connections(self) -> int:
        """Return how many client connections are open through the proxy."""
        with self._cond:
            return len(self._links)

    @property
    def peak_connections(self) -> int:
        """Return the most client connections that were ever open at once through the proxy."""
        with self._cond:
            return self._peak

    def pause(self) -> None:
        """Stop forwarding in both directions until resume(); nothing is lost."""
        with self._cond:
            self._paused = True

    def resume(self) -> None:
        """Forward again, starting with whatever was held while paused."""
        with self._cond:
            self._paused = False
            self._cond.notify_all()

    def reset_all(self) -> None:
        """Abort every open connection with an RST to the client and to the server."""
        with self._cond:
            links = list(self._links)
        for link in links:
            link.close(reset=True)
        with self._cond:
            self._cond.notify_all()

    def set_latency(self, seconds: float) -> None:
        """Hold each chunk from the server ``seconds`` before forwarding it (0 turns it off)."""
        if seconds < 0:
            raise ValueError("latency must be >= 0")
        with self._cond:
            self._latency = float(seconds)
            self._cond.notify_all()

    def drop_next_reply(self, match: bytes, count: int = 1) -> threading.Event:
        """Lose the replies to the next `count` requests containing ``match``; the event is
        set once the last of them is lost.

        Each request reaches the server (so the command runs); its reply is swallowed and the
        client connection closed. A count above 1 also loses the client's resends (redis-py
        resends a command once when its connection drops). Arming again replaces an arm.
        """
        if not match or len(match) > MAX_MATCH:
            raise ValueError(f"match must be 1..{MAX_MATCH} bytes")
        if count < 1:
            raise ValueError("count must be >= 1")
        lost = threading.Event()
        with self._cond:
            self._armed = (bytes(match), lost, count)
        return lost

    # -- threads -----------------------------------------------------------------------------

    def _spawn(self, target: Callable[..., None], name: str, *args: object) -> threading.Thread:
        thread = threading.Thread(
            target=target, args=args, name=f"tcp-proxy-{self.port}-{name}", daemon=True
        )
        with self._cond:
            # Forget finished threads so a long-lived proxy does not accumulate them.
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()
        return thread

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # stop() shut the listener down
            try:
                upstream = socket.create_connection(self.target, timeout=CONNECT_TIMEOUT)
            except OSError:
                client.close()  # the target is down: the client sees its connection closed
                continue
            upstream.settimeout(None)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(client, upstream)
            with self._cond:
                if self._stopping:
                    link.close()
                    return
                self._links.add(link)
                self._peak = max(self._peak, len(self._links))
            self._spawn(self._pump_requests, "requests", link)
            self._spawn(self._pump_replies, "replies", link)

    def _forwarding(self, link: _Link) -> bool:
        """Wait while paused; return False when the link closed or the proxy is stopping."""
        with self._cond:
            self._cond.wait_for(lambda: not self._paused or link.closed or self._stopping)
            return not (link.closed or self._stopping)

    def _pump_requests(self, link: _Link) -> None:
        tail = b""
        try:
            while data := _recv(link.client):
                window = tail + data
                with self._cond:
                    if self._armed is not None:
                        match, lost, left = self._armed
                        # Only a match that ends in the new bytes: one wholly in `tail` was in
                        # a request already forwarded before the proxy was armed.
                        if window.find(match, max(0, len(tail) - len(match) + 1)) != -1:
                            self._armed = (match, lost, left - 1) if left > 1 else None
                            # Only the last loss sets the caller's event.
                            link.lose_reply = lost if left == 1 else threading.Event()
                tail = window[-MAX_MATCH:]
                if not self._forwarding(link) or not _send(link.upstream, data):
                    return
        finally:
            self._finish(link)

    def _pump_replies(self, link: _Link) -> None:
        try:
            while data := _recv(link.upstream):
                with self._cond:
                    lost, latency = link.lose_reply, self._latency
                if lost is not None:
                    # The server answers only after running the command: it ran. Lose the
                    # answer and hang up, as a network failure after the write would. The
                    # event first: whoever sees the hang-up may check it at once.
                    lost.set()
                    link.close()
                    return
                if latency > 0:
                    with self._cond:
                        self._cond.wait_for(lambda: link.closed or self._stopping, latency)
                if not self._forwarding(link) or not _send(link.client, data):
                    return
        finally:
            self._finish(link)

    def _finish(self, link: _Link) -> None:
        link.close()
        with self._cond:
            self._links.discard(link)
            self._cond.notify_all()


def _recv(sock: socket.socket) -> bytes:
    """Return the next bytes from ``sock``, or b"" once it is closed or failed."""
    try:
        return sock.recv(CHUNK)
    except OSError:
        return b""


def _send(sock: socket.socket, data: bytes) -> bool:
    """Send all of ``data``; return False if the socket is closed or failed."""
    try:
        sock.sendall(data)
        return True
    except OSError:
        return False
