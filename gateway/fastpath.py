"""A lean WSGI path for the gateway's busiest request: a well-formed ``POST /enqueue``.

Measured on the 2-core VM, Flask's request and response machinery (request context, routing,
header objects, response building) cost more CPU than everything TaskForge does for an
enqueue, Redis call included. This middleware serves the *success* path of ``POST /enqueue``
itself, with the same parsing, validation, engine call, metrics and logs as the Flask view
(``gateway.jobs.enqueue``), and passes everything else to Flask.

What it will not answer it hands to Flask untouched, so every refusal keeps one source:
a missing or wrong token, a query string, a Content-Encoding, a chunked or oversized body,
a malformed Idempotency-Key, bad JSON, an invalid job. The body it has read is put back for
Flask. That hand-over happens only *before* the engine is called: once an enqueue may have
reached Redis, the answer (a 409 conflict, a 503 outage) is rendered here from the same error
helpers, because running the enqueue a second time could create a second job.
"""

from __future__ import annotations

import hmac
import io
import time
from collections.abc import Callable, Iterable
from typing import Any

from flask import Flask

from gateway import errors, service
from gateway.auth import bearer_token
from gateway.body import MAX_BODY_BYTES, BodyError, parse_json, read_limited
from gateway.context import Gateway
from gateway.inputs import IDEMPOTENCY_KEY
from gateway.jobs import key_conflict
from shared import metrics
from shared.jobs import EnqueueRequest, ValidationError, validate_enqueue
from shared.scripts import IdempotencyConflict

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
PATH = "/enqueue"
STATUS = {True: "201 CREATED", False: "200 OK"}  # created, or found by its Idempotency-Key
COMPACT = (",", ":")  # what Flask's jsonify uses outside debug mode


class FastEnqueue:
    """WSGI middleware in front of the Flask app: serve a valid POST /enqueue directly."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.flask_wsgi: WsgiApp = app.wsgi_app
        self.gateway: Gateway = app.extensions[Gateway.EXTENSION]
        token = self.gateway.settings.api_token
        self.token = token.encode("utf-8") if token is not None else None

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """Answer a valid POST /enqueue; pass any other request to Flask."""
        if environ.get("PATH_INFO") != PATH or environ.get("REQUEST_METHOD") != "POST":
            return self.flask_wsgi(environ, start_response)
        started = time.perf_counter()
        accepted = self._accept(environ)
        if accepted is None:
            return self.flask_wsgi(environ, start_response)  # Flask words the refusal
        request, key = accepted
        try:
            doc, created = service.enqueue_one(
                self.gateway, request, key, environ.get("HTTP_TRACEPARENT")
            )
        except Exception as exc:  # answered exactly as the Flask app would answer it
            return self._error(exc, environ, start_response)
        metrics.ENQUEUE_SECONDS.observe(time.perf_counter() - started)
        body = (self.app.json.dumps(doc, separators=COMPACT) + "\n").encode("ascii")
        start_response(
            STATUS[created],
            [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
                ("Location", f"/jobs/{doc['id']}"),
            ],
        )
        return [body]

    def _accept(self, environ: dict[str, Any]) -> tuple[EnqueueRequest, str | None] | None:
        """Return the job and Idempotency-Key of a request Flask would accept, else None."""
        if environ.get("QUERY_STRING"):
            return None  # Flask refuses query parameters /enqueue does not take
        if self.token is not None:
            given = bearer_token(environ.get("HTTP_AUTHORIZATION"))
            if given is None or not hmac.compare_digest(given, self.token):
                return None
        if environ.get("HTTP_CONTENT_ENCODING", "identity").strip().lower() != "identity":
            return None
        length = environ.get("CONTENT_LENGTH", "")
        if not (length.isdigit() and int(length) <= MAX_BODY_BYTES):
            return None  # chunked, or over the limit: Flask streams and refuses it
        key = environ.get("HTTP_IDEMPOTENCY_KEY")
        if key is not None and not IDEMPOTENCY_KEY.fullmatch(key):
            return None
        raw = read_limited(environ["wsgi.input"], int(length))
        environ["wsgi.input"] = io.BytesIO(raw)  # for Flask, should it answer after all
        try:
            return validate_enqueue(parse_json(raw)), key
        except (BodyError, ValidationError):
            return None

    def _error(
        self, exc: Exception, environ: dict[str, Any], start_response: StartResponse
    ) -> Iterable[bytes]:
        """Answer an error raised by (or after) the engine call with the app's own helpers."""
        with self.app.app_context():
            if isinstance(exc, IdempotencyConflict):
                response = errors.api_error_response(key_conflict(exc))
            else:
                response = errors.unexpected_response(exc)
            return response(environ, start_response)
