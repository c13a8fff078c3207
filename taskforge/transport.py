"""HTTP to the gateway: one connection pool per client, retries with backoff, typed errors.

urllib3 (no dependencies of its own; its pools are thread-safe) keeps the connections: a client
shared by many threads opens at most ``pool_size`` of them and reuses each. Its own retries are
off, since what may be retried depends on the request, which only the caller knows:

- ``Replay.ALWAYS``: reads, and writes the gateway makes idempotent (an enqueue or a batch
  with its jobs' ids or an Idempotency-Key, a cancel, a pause). Retried on a refused or reset connection, a
  timeout, a lost reply and a 503 (Redis unreachable, or no slot free for a wait).
- ``Replay.UNSENT``: writes a repeat could apply twice (a single replay). Retried only
  when the request cannot have reached the gateway (the connection was never made); otherwise
  ``Unavailable(outcome_unknown=True)`` says the write may or may not have happened.
"""

from __future__ import annotations

import enum
import json
import random
import time
from typing import Any
from urllib.parse import urlencode, urlsplit

import urllib3
import urllib3.exceptions

from taskforge.errors import Unavailable, api_error
from taskforge.version import __version__

DEFAULT_URL = "http://127.0.0.1:8080"
RETRY_AFTER_CAP = 5.0  # seconds: the longest Retry-After honoured between two tries


class Replay(enum.Enum):
    """When a failed request may be sent again (see the module's docstring)."""

    ALWAYS = "always"
    UNSENT = "unsent"


class Transport:
    """Sends requests to one gateway and decodes its JSON answers."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None,
        timeout: float,
        retries: int,
        backoff: float,
        max_backoff: float,
        pool_size: int,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"bad gateway URL {url!r}: expected http://host:port or https://...")
        self.url = url.rstrip("/")
        self._prefix = parts.path.rstrip("/")  # a gateway mounted under a path prefix
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._headers = {
            "User-Agent": f"taskforge-client/{__version__}",
            "Accept": "application/json",
        }
        if token:
            self._headers["Authorization"] = f"Bearer {header_token(token)}"
        # block=True: a thread beyond pool_size waits for a free connection instead of opening
        # one more that would be thrown away after the request.
        self._pool = urllib3.connection_from_url(
            f"{parts.scheme}://{parts.netloc}", maxsize=pool_size, block=True, retries=False
        )

    def close(self) -> None:
        """Close every pooled connection."""
        self._pool.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        headers: dict[str, str] | None = None,
        replay: Replay = Replay.ALWAYS,
        read_timeout: float | None = None,
        within: float | None = None,
    ) -> Any:
        """Send one request (retrying as ``replay`` allows); return its decoded JSON, or None.

        `within`: seconds after the first try began past which no try is sent (an enqueue's
        id is remembered only so long: taskforge.client ENQUEUE_RETRY_WINDOW).
        Raises the ``ApiError`` subclass for the status (400, 401, 404, 409, ...), or
        ``Unavailable`` once the tries (or the window) are spent.
        """
        began = time.monotonic()
        target = self._prefix + path
        if query:
            target += "?" + urlencode({k: v for k, v in query.items() if v is not None}, doseq=True)
        sent_headers = dict(self._headers)
        payload = None
        if body is not None:
            payload = json.dumps(body, separators=(",", ":")).encode()
            sent_headers["Content-Type"] = "application/json"
        sent_headers.update(headers or {})
        timeout = urllib3.Timeout(connect=self.timeout, read=read_timeout or self.timeout)
        last = ""
        last_503: dict[str, Any] | None = None
        for attempt in range(self.retries + 1):
            pause = self._pause(attempt)
            try:
                response = self._pool.urlopen(
                    method,
                    target,
                    body=payload,
                    headers=sent_headers,
                    timeout=timeout,
                    retries=False,
                    redirect=False,
                    preload_content=True,
                )
            except urllib3.exceptions.NewConnectionError as exc:
                last = f"cannot connect to {self.url}: {_reason(exc)}"
            except urllib3.exceptions.HTTPError as exc:
                # Sent, or maybe sent: timed out, reset, or the reply was lost.
                last = f"no answer from {self.url}: {_reason(exc)}"
                if replay is Replay.UNSENT:
                    raise Unavailable(
                        f"{last}; the request may or may not have taken effect",
                        outcome_unknown=True,
                    ) from None
            else:
                doc = _decode(response)
                if response.status < 400:
                    return doc
                if response.status != 503:
                    raise api_error(response.status, doc, self._stranger(response.status))
                last = f"{self.url} is unavailable (503): {_message(doc)}"
                last_503 = doc if isinstance(doc, dict) else None
                if replay is Replay.UNSENT:
                    raise Unavailable(
                        f"{last}; the request may or may not have taken effect",
                        outcome_unknown=True,
                        body=last_503,
                    )
                pause = max(pause, _retry_after(response))
            if attempt == self.retries:
                break
            if within is not None and time.monotonic() + pause - began > within:
                tries = attempt + 1
                raise Unavailable(
                    f"{last} (tried {tries} time{'' if tries == 1 else 's'} in {within:g} s, "
                    "as long as a resend is sure to find a job the request made); it may or "
                    "may not have taken effect",
                    outcome_unknown=True,
                    body=last_503,
                )
            time.sleep(pause)
        tries = self.retries + 1
        raise Unavailable(f"{last} (tried {tries} time{'' if tries == 1 else 's'})", body=last_503)

    def _stranger(self, status: int) -> str:
        """Return the message for an error answer without the gateway's ``{"error": ...}``."""
        return (
            f"HTTP {status} without a TaskForge error message: is {self.url} a TaskForge gateway?"
        )

    def _pause(self, attempt: int) -> float:
        """Return the wait before try ``attempt + 1``: exponential, capped, with full jitter."""
        return random.uniform(0.5, 1.0) * min(self.max_backoff, self.backoff * 2**attempt)


def header_token(token: str) -> str:
    """Return `token` as it goes into the Authorization header; ValueError if it cannot.

    Surrounding whitespace is dropped, as the gateway drops it from TASKFORGE_API_TOKEN (a
    token read from a file often ends in a newline or CR). Non-ASCII characters go as their
    UTF-8 bytes, which is what the gateway compares. No error message ever holds the token.
    """
    token = token.strip()
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in token):
        raise ValueError(
            "the API token (--token or TASKFORGE_API_TOKEN) holds a control character "
            "(such as a CR or LF inside it), which an HTTP header cannot carry: check how it "
            "was set (the token itself is not shown)"
        )
    # http.client writes header text as latin-1: these characters are the UTF-8 bytes (or the
    # very bytes of an argument that was not UTF-8, which Python keeps as surrogates).
    return token.encode("utf-8", "surrogateescape").decode("latin-1")


def _decode(response: urllib3.BaseHTTPResponse) -> Any:
    """Return a response's JSON document, or its text when it is not JSON, or None when empty."""
    data = response.data
    if not data:
        return None
    if "json" in response.headers.get("Content-Type", ""):
        try:
            return json.loads(data)
        except ValueError:
            pass
    return {"error": data.decode("utf-8", "replace")[:500]}


def _message(doc: Any) -> str:
    """Return the server's error message from a decoded body."""
    if isinstance(doc, dict) and doc.get("error"):
        return str(doc["error"])
    return "no message"


def _retry_after(response: urllib3.BaseHTTPResponse) -> float:
    """Return the server's Retry-After in seconds (capped), or 0 when it gave none."""
    try:
        return min(RETRY_AFTER_CAP, max(0.0, float(response.headers.get("Retry-After", 0))))
    except ValueError:
        return 0.0


def _reason(exc: Exception) -> str:
    """Return a one-line reason for a transport error, without urllib3's object reprs."""
    cause = exc.__cause__
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror.lower()  # "connection refused", "name or service not known"
    text = str(getattr(exc, "reason", None) or exc)
    # "HTTPConnection(host='127.0.0.1', port=9): Failed to establish a new connection: ..."
    if "): " in text:
        text = text.split("): ", 1)[1]
    return text.splitlines()[0] if text else type(exc).__name__
