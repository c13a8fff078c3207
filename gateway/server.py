"""gunicorn integration: JSON access and error logs, JSON bodies for gunicorn's own errors.

Imported by ``deploy/gunicorn.conf.py`` in gunicorn's master, before any worker forks.
"""

from __future__ import annotations

import json
import logging
import os
from datetime import timedelta
from typing import Any

import gunicorn.util
from gunicorn.glogging import Logger

from shared.obs import log as shared_log
from shared.settings.config import LOG_LEVELS

ACCESS_EVENT = "http_request"


def log_level() -> str:
    """Return LOG_LEVEL if valid, else INFO (the app itself refuses a bad one at boot)."""
    level = os.environ.get("LOG_LEVEL", "").strip().upper()
    return level if level in LOG_LEVELS else "INFO"


def is_bin_run_probe(environ: dict[str, Any]) -> bool:
    """Say whether a request is bin/run's own readiness poll, which the access log leaves out.

    Only a GET /ready qualifies: a client claiming the agent can hide nothing but a probe.
    """
    return (
        environ.get("REQUEST_METHOD") == "GET"
        and environ.get("PATH_INFO") == "/ready"
        and environ.get("HTTP_USER_AGENT") == shared_log.READY_PROBE_AGENT
    )


class JsonLogger(Logger):
    """gunicorn's logger, writing through the shared JSON-lines configuration."""

    def setup(self, cfg: Any) -> None:
        """Route gunicorn.error and gunicorn.access into the root JSON handler on stdout."""
        super().setup(cfg)
        shared_log.configure("gateway", log_level())
        for logger in (self.error_log, self.access_log):
            logger.handlers.clear()
            logger.propagate = True
        self.access_log.setLevel(logging.INFO)

    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: timedelta) -> None:
        """Log one request as one JSON line (no headers but the user agent and request id)."""
        if not self.cfg.accesslog or is_bin_run_probe(environ):
            return
        query = environ.get("QUERY_STRING")
        extra = {
            "method": environ.get("REQUEST_METHOD"),
            "path": environ.get("PATH_INFO", "") + (f"?{query}" if query else ""),
            "status": resp.status_code if isinstance(resp.status_code, int) else None,
            "duration_ms": round(request_time.total_seconds() * 1000, 3),
            "bytes": getattr(resp, "sent", None),
            "remote": environ.get("REMOTE_ADDR"),
            # As the client or a proxy claims it (Heroku's router sets it): not proof.
            "forwarded_for": environ.get("HTTP_X_FORWARDED_FOR"),
            "user_agent": environ.get("HTTP_USER_AGENT"),
            "request_id": environ.get("HTTP_X_REQUEST_ID"),
        }
        if self.access_log.isEnabledFor(logging.INFO):
            shared_log.log_line(self.access_log, logging.INFO, ACCESS_EVENT, extra)


def write_json_error(sock: Any, status_int: int, reason: str, mesg: str) -> None:
    """Write gunicorn's own error answers (bad request line, headers too large) as JSON."""
    body = json.dumps({"error": f"{reason}: {mesg}" if mesg else reason}).encode()
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    gunicorn.util.write_nonblock(sock, head.encode("latin-1") + body)


def install_json_errors() -> None:
    """Make gunicorn answer its own errors in JSON like the app (it calls util.write_error)."""
    gunicorn.util.write_error = write_json_error
