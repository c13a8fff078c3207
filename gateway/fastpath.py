"""A lean WSGI path for the gateway's busiest request, ``POST /enqueue``.

Flask's request and response machinery (request context, routing, header objects, response
building) costs more CPU than the enqueue itself (bench/MEASUREMENTS.md). This middleware runs
Flask's own enqueue code (``gateway.jobs_api.enqueue_reply``, after ``auth.TokenCheck`` and
``inputs.check_body``) without that machinery, and renders its errors with the handlers the
app registered, so both paths answer alike by construction (tests/gateway/test_fastpath.py
checks it on a table of requests).

It hands a request to Flask only before reading any of it: a query string (refused there with
the route's own wording) or a chunked body (streamed by Werkzeug).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask
from werkzeug.datastructures import EnvironHeaders

from gateway import auth, inputs
from gateway.body import read_limited
from gateway.context import Gateway
from gateway.jobs_api import enqueue_reply
from gateway.ui.security import NO_STORE
from shared.obs import metrics

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
PATH = "/enqueue"
STATUS = {201: "201 CREATED", 200: "200 OK"}  # created, or found by its Idempotency-Key or id
COMPACT = (",", ":")  # what Flask's jsonify uses outside debug mode


class FastEnqueue:
    """WSGI middleware in front of the Flask app: serve POST /enqueue directly."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.flask_wsgi: WsgiApp = app.wsgi_app
        self.gateway: Gateway = app.extensions[Gateway.EXTENSION]
        self.check_token = auth.token_check(app)  # None when the gateway has no token
        # What app.json.dumps(doc, separators=COMPACT) runs, made once: json.dumps builds a
        # new encoder per call when given any option (the same text, byte for byte).
        self.encode = json.JSONEncoder(
            ensure_ascii=app.json.ensure_ascii,  # type: ignore[attr-defined]
            sort_keys=app.json.sort_keys,  # type: ignore[attr-defined]
            separators=COMPACT,
            default=app.json.default,  # type: ignore[attr-defined]
        ).encode

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """Answer POST /enqueue with a Content-Length and no query; pass the rest to Flask."""
        if environ.get("PATH_INFO") != PATH or environ.get("REQUEST_METHOD") != "POST":
            return self.flask_wsgi(environ, start_response)
        # No Content-Length and no Transfer-Encoding: HTTP/1.1 says the body is empty.
        length = environ.get("CONTENT_LENGTH") or "0"
        if (
            environ.get("QUERY_STRING")
            or not length.isdigit()
            or "HTTP_TRANSFER_ENCODING" in environ
        ):
            return self.flask_wsgi(environ, start_response)
        started = time.perf_counter()
        headers = EnvironHeaders(environ)
        try:
            # In the order Flask runs them: before_request's auth, then the view's checks.
            if self.check_token is not None:
                self.check_token(environ, headers)
            inputs.check_body(headers, int(length), PATH)
            raw = read_limited(environ["wsgi.input"], int(length), PATH)
            doc, status, extra = enqueue_reply(self.gateway, headers, raw)
        except Exception as exc:
            return self._error(exc, environ, start_response)
        metrics.ENQUEUE_SECONDS.observe(time.perf_counter() - started)
        body = (self.encode(doc) + "\n").encode("ascii")
        start_response(
            STATUS[status],
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
                *extra.items(),
                ("Cache-Control", NO_STORE),  # as gateway/ui/access.py gives Flask's answers
            ],
        )
        return [body]

    def _error(
        self, exc: Exception, environ: dict[str, Any], start_response: StartResponse
    ) -> Iterable[bytes]:
        """Answer `exc` with the error handler the Flask app registered for it."""
        # Never by handing the request to Flask: the enqueue may have reached Redis, and
        # running it a second time could create a second job.
        with self.app.request_context(environ):
            response = self.app.make_response(self.app.handle_user_exception(exc))
            response = self.app.process_response(response)
        return response(environ, start_response)
