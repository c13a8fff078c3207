"""shared.engine.scripts.script_signature: each script's KEYS and ARGV named once, from its Lua header."""

from __future__ import annotations

import re

import pytest

from shared.engine.scripts import SCRIPT_NAMES, load_source
from shared.engine.scripts.script_signature import Signature, parse

HEADER = """-- demo: what it does.
--
-- KEYS[1] -> {prefix}pending          zset
-- KEYS[2] -> {prefix}job:<id>         hash
-- KEYS[3] -> {ns:queue}:v2:<state>    the index
-- KEYS[4] -> {prefix}events           stream
--
-- ARGV[1] -> job_id: the job's id
-- ARGV[2] -> now_ms: now (ms) override,
--            or '' for Redis TIME
-- ARGV[3] -> events_cap: events stream cap; absent: no event
"""


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_script_header_gives_a_signature(name: str) -> None:
    signature = parse(name, load_source(name))
    assert signature.keys and signature.args, signature


def test_keys_are_named_by_their_pattern_and_arguments_by_their_own_name() -> None:
    signature = parse("demo", HEADER)
    assert signature.keys == ("pending", "job", "state", "events")
    assert signature.args == ("job_id", "now_ms", "events_cap")


def test_a_call_binds_names_to_positions() -> None:
    signature = parse("demo", HEADER)
    named = dict(pending="p", job="j", state="s", events="e", job_id="1", now_ms="", events_cap=9)
    assert signature.bind(named) == (["p", "j", "s", "e"], ["1", "", 9])


def test_trailing_values_not_sent_are_left_out() -> None:
    signature = parse("demo", HEADER)
    named = dict(pending="p", job="j", state="s", events=None, job_id="1", now_ms="")
    assert signature.bind({**named, "events_cap": None}) == (["p", "j", "s"], ["1", ""])


def test_a_value_left_out_before_one_sent_is_refused() -> None:
    signature = parse("demo", HEADER)
    named = dict(pending="p", job=None, state="s", events="e", job_id="1", now_ms="", events_cap=1)
    with pytest.raises(ValueError, match="only trailing"):
        signature.bind(named)


@pytest.mark.parametrize(
    ("change", "missing", "unknown"),
    [
        ({"drop": "now_ms"}, "['now_ms']", "[]"),
        ({"add": "now"}, "[]", "['now']"),
        ({"drop": "now_ms", "add": "now"}, "['now_ms']", "['now']"),
    ],
)
def test_a_missing_or_unknown_name_raises(
    change: dict[str, str], missing: str, unknown: str
) -> None:
    signature = parse("demo", HEADER)
    named = dict(pending="p", job="j", state="s", events="e", job_id="1", now_ms="", events_cap=1)
    named.pop(change.get("drop", ""), None)
    if "add" in change:
        named[change["add"]] = "x"
    with pytest.raises(
        TypeError, match=rf"missing {re.escape(missing)}, unknown {re.escape(unknown)}"
    ):
        signature.bind(named)


def test_a_variadic_tail_is_spread() -> None:
    signature = parse("renew", load_source("renew"))
    assert signature == Signature(
        "renew", ("processing", "jobs"), ("lease_ms", "now_ms", "tokens"), True, True
    )
    named = dict(processing="p", jobs=["j1", "j2"], lease_ms=5, now_ms="", tokens=[1, 2])
    assert signature.bind(named) == (["p", "j1", "j2"], [5, "", 1, 2])


@pytest.mark.parametrize(
    ("header", "error"),
    [
        ("-- ARGV[1] -> the job's id\n", "without a name"),
        ("-- KEYS[1] -> {p}a\n-- KEYS[3] -> {p}b\n", "out of order"),
        ("-- KEYS[1] -> {p}a\n-- KEYS[2] -> {q}a\n", "repeat"),
        ("-- KEYS[1..n] -> jobs: {p}job:<id>\n-- KEYS[2] -> {p}b\n", "variadic"),
        ("-- KEYS[1] -> {p}now_ms\n-- ARGV[1] -> now_ms: now\n", "share a name"),
    ],
)
def test_a_malformed_header_is_refused(header: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse("bad", header)
