"""Fuzz real gunicorn from the gateway's own OpenAPI document: no 5xx, answers as documented."""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import quote, urlencode

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.openapi import document
from shared.keys import Keys
from shared.scripts import Scripts
from tests.gateway import helpers
from tests.gateway.conftest import Gunicorn
from tests.gateway.openapi_tools import ANY_JSON, Document

MIN_REQUESTS = 500
DOC = Document(document())
PATH_TEXT = st.text(
    st.characters(blacklist_characters="/", blacklist_categories=("Cs",)), min_size=1, max_size=40
)
# What http.client will put in a header: latin-1, no control characters, no edge whitespace.
HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=300).filter(
    lambda s: s == s.strip() and "\x7f" not in s
)


@st.composite
def requests(draw: st.DrawFn, seeds: list[str]) -> tuple[str, str, dict[str, str], Any, dict]:
    """Draw one request for a documented operation: valid or not, by turns."""
    path, method, op = draw(st.sampled_from(DOC.operations()))
    query: dict[str, str] = {}
    headers: dict[str, str] = {}
    for param in map(DOC.resolve, op.get("parameters", [])):
        schema, name = param["schema"], param["name"]
        if param["in"] == "path":
            value = draw(st.sampled_from(seeds) | DOC.strategy(schema) | PATH_TEXT)
            path = path.replace(f"{{{name}}}", quote(value, safe=""))
        elif param["in"] == "query" and draw(st.booleans()):
            query[name] = str(draw(DOC.strategy(schema) | st.text(max_size=20)))
        elif param["in"] == "header" and draw(st.booleans()):
            headers[name] = draw(DOC.strategy(schema) | HEADER_TEXT)
    body = None
    if "requestBody" in op:
        schema = op["requestBody"]["content"]["application/json"]["schema"]
        body = draw(
            DOC.strategy(schema).map(json.dumps)
            | ANY_JSON.map(json.dumps)
            | st.binary(max_size=300)
        )
    if query:
        path += "?" + urlencode(query)
    return method.upper(), path, headers, body, op


def check_response(op: dict[str, Any], response: http.client.HTTPResponse, raw: bytes) -> None:
    """Assert the answer is one the operation documents, in the documented shape."""
    status = response.status
    assert status < 500, raw[:300]
    assert str(status) in op["responses"], f"undocumented {status}: {raw[:300]!r}"
    spec = DOC.resolve(op["responses"][str(status)])
    for header in spec.get("headers", {}):
        assert response.getheader(header) is not None, f"{status} without {header}"
    content = spec.get("content")
    if not content:
        assert raw == b""
        return
    media_type, media = next(iter(content.items()))
    assert response.getheader("Content-Type", "").startswith(media_type)
    if media_type == "application/json":
        errors = DOC.errors(media["schema"], json.loads(raw))
        assert not errors, errors


@pytest.fixture
def seeds(r: redis.Redis) -> list[str]:
    """Return the ids of a pending, a dead and a completed job on the private server."""
    scripts = Scripts(r, Keys())
    return [helpers.enqueue(scripts), helpers.dead(scripts), helpers.completed(scripts)]


def test_fuzzing_from_the_openapi_document_finds_no_5xx(gw: Gunicorn, seeds: list[str]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    sent: list[int] = []

    @settings(
        max_examples=MIN_REQUESTS + 50,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(requests(seeds))
    def check(request: tuple[str, str, dict[str, str], Any, dict]) -> None:
        method, path, headers, body, op = request
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        except (http.client.HTTPException, OSError):
            conn.close()  # the server closed a kept-alive connection: once more on a new one
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        sent.append(response.status)
        check_response(op, response, raw)

    try:
        check()
    finally:
        conn.close()
    assert len(sent) >= MIN_REQUESTS
    # Both sides were explored: accepted requests and refused ones.
    assert any(s < 300 for s in sent) and any(400 <= s < 500 for s in sent)
