"""The script files themselves: return codes, flags lines, headers, loading."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from importlib import resources
from typing import Any

import pytest
import redis

from shared.engine.engine_types import Code, EngineError
from shared.engine.history import Actor
from shared.engine.scripts import SCRIPT_NAMES, Scripts, load_source
from shared.model.job_ids import new_client_id
from shared.model.jobs import JobState, format_ms
from shared.read.listing import list_jobs
from shared.read.throughput import last_hour
from tests.engine.conftest import J1, J2, J3, POLICY, T0, K, claim, enqueue, request, start

LUA = resources.files("shared.engine") / "lua"
CODE_LINE = re.compile(r"^local ([A-Z_]+) = (-?\d+)\b", re.MULTILINE)
SLOT = re.compile(r"\b(KEYS|ARGV)\[(\d+)(\.\.n)?\]")
RETURNED_CODE = re.compile(r"\b(" + "|".join(c.name for c in Code) + r")\b")


def source(name: str) -> str:
    return (LUA / f"{name}.lua").read_text()


def header(name: str) -> str:
    """Return the comment block that opens a script, after its flags line."""
    lines = source(name).splitlines()[1:]
    block = []
    for line in lines:
        if not line.startswith("--") or line.startswith("--- @include"):
            break
        block.append(line)
    return "\n".join(block)


def uncommented(text: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def code_of(name: str) -> str:
    """Return the script as Redis runs it (includes expanded), without comments."""
    return uncommented(load_source(name))


def slots(text: str) -> dict[str, set[int]]:
    """Return the KEYS and ARGV indexes named in `text` (a `[i..n]` range counts as i)."""
    found: dict[str, set[int]] = {"KEYS": set(), "ARGV": set()}
    for table, index, _ in SLOT.findall(text):
        found[table].add(int(index))
    return found


def variadic(text: str) -> dict[str, int | None]:
    """Return, per table, the first index of a documented `[i..n]` range, if any."""
    ranges: dict[str, int | None] = {"KEYS": None, "ARGV": None}
    for table, index, rest in SLOT.findall(text):
        if rest:
            ranges[table] = int(index)
    return ranges


def test_codes_lua_matches_the_code_enum_exactly() -> None:
    text = (LUA / "includes" / "codes.lua").read_text()

    in_lua = {name: int(value) for name, value in CODE_LINE.findall(text)}

    assert in_lua == {code.name: code.value for code in Code}
    assert len(CODE_LINE.findall(text)) == len(in_lua), "a code is defined twice"


def test_the_script_files_are_exactly_the_registered_scripts() -> None:
    files = {p.name.removesuffix(".lua") for p in LUA.iterdir() if p.name.endswith(".lua")}

    assert files == set(SCRIPT_NAMES)


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_script_opens_with_a_lua_flags_line(name: str) -> None:
    first = source(name).splitlines()[0]

    assert re.fullmatch(r"#!lua( flags=[a-z-]+(,[a-z-]+)*)?", first), first
    assert load_source(name).startswith(first + "\n")


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_script_header_names_the_script_and_each_key_and_argument_it_uses(
    name: str,
) -> None:
    code = code_of(name)
    documented, used = slots(header(name)), slots(code)

    assert header(name).startswith(f"-- {name}: ")
    for table in ("KEYS", "ARGV"):
        assert used[table] <= documented[table], f"{table} used but not in the header"
        if re.search(rf"\b{table}\b(?!\[)", code):
            continue  # the whole table is handed to an include
        assert documented[table] <= used[table] | {variadic(header(name))[table]}, (
            f"{table} in the header but never used"
        )


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_script_header_names_each_code_it_returns(name: str) -> None:
    own_code = uncommented(source(name))
    returns = [line for line in own_code.splitlines() if re.search(r"\breturn\b", line)]
    returned = {code for line in returns for code in RETURNED_CODE.findall(line)}

    assert returned <= set(RETURNED_CODE.findall(header(name))), returned


def test_every_include_is_expanded() -> None:
    for name in SCRIPT_NAMES:
        assert "@include" not in code_of(name), name


def test_load_puts_every_script_in_redis(r: redis.Redis) -> None:
    r.script_flush()
    engine = Scripts(r, K, POLICY)
    shas = list(engine.transport.shas.values())
    assert not any(r.script_exists(*shas))

    engine.load()

    assert len(shas) == len(SCRIPT_NAMES)
    assert all(r.script_exists(*shas))


def test_every_wrapper_passes_as_many_keys_and_arguments_as_its_header_names(
    scripts: Scripts, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: dict[str, tuple[int, int]] = {}
    call, send = scripts.transport.call, scripts.transport.send

    def record(name: str, keys: list[str], args: list[Any]) -> Any:
        sent[name] = (len(keys), len(args))
        return call(name, keys, args)

    def record_send(pipe: Any, name: str, keys: list[str], args: list[Any]) -> None:
        sent[name] = (len(keys), len(args))
        send(pipe, name, keys, args)

    monkeypatch.setattr(scripts.transport, "call", record)
    monkeypatch.setattr(scripts.transport, "send", record_send)
    token = start(scripts, J1).token
    scripts.renew([(J1, token), (J1, token)], now_ms=T0)
    # With the job in hand named (workerd.prefetch): the header's last argument is sent.
    scripts.complete(J1, token, now_ms=T0, holding=J2)
    token = start(scripts, J2).token
    scripts.fail(J2, token, "boom", now_ms=T0)
    scripts.promote(now_ms=T0)
    scripts.recover(now_ms=T0)
    token = start(scripts, J3).token
    scripts.release(J3, token, now_ms=T0)
    scripts.release_worker("w1", running="", now_ms=T0)
    scripts.claim_batch("w1", 2, now_ms=T0)
    scripts.complete_batch("w1", [(J1, 1, "null"), (J2, 1, "null")], count=2, now_ms=T0)
    scripts.cancel(J2, now_ms=T0)
    scripts.cancel_running(J1, token, "handler", now_ms=T0)
    for action in (scripts.replay, scripts.purge):
        with pytest.raises(EngineError):
            action(J1)
    scripts.trim(now_ms=T0)
    scripts.heartbeat("w1", {"host": "h", "pid": 1}, 1_000, now_ms=T0)
    scripts.quiet_host("w1", True)
    scripts.pause_queue("q", now_ms=T0)
    scripts.resume_queue("q")
    scripts.set_limits("q", '{"c": 1}')
    scripts.open_gates(queue="q", now_ms=T0)
    scripts.stats()
    list_jobs(scripts, JobState.PENDING, ["default"])
    last_hour(scripts, ["default"], now_ms=T0)
    scripts.enqueue(request(), "00000000-0000-4000-8000-0000000000e4", idempotency_key="k")
    batch = [(request(), "00000000-0000-4000-8000-0000000000e5")]
    scripts.enqueue_many(batch, idempotency_key="kb")
    # Last of the enqueues: a client's own id sends its digest, the header's last argument.
    own = new_client_id("default")
    scripts.enqueue(request(), "00000000-0000-4000-8000-0000000000e6", actor=Actor.SCHEDULER)
    scripts.enqueue(request(id=own), own)
    scripts.publish_schedules([("s", "{}")])
    scripts.advance_schedule("s", T0, J1, missed=1, jobs=1)
    scripts.pause_schedule("s", now_ms=T0)
    scripts.resume_schedule("s", now_ms=T0)
    scripts.delete_queue("q", delete=False)

    assert set(sent) == set(SCRIPT_NAMES)
    for name, counts in sent.items():
        text = header(name)
        for table, count in zip(("KEYS", "ARGV"), counts, strict=True):
            first_of_range = variadic(text)[table]
            if first_of_range is None:
                assert count == max(slots(text)[table], default=0), (name, table)
            else:
                assert count >= first_of_range, (name, table)


@pytest.fixture
def run_out_of_memory(r: redis.Redis) -> Iterator[Callable[[], None]]:
    """Return a function that makes the private server refuse commands that may grow memory;
    the limit is lifted after the test."""

    def limit() -> None:
        r.config_set("maxmemory-policy", "noeviction")
        r.config_set("maxmemory", 1)

    try:
        yield limit
    finally:
        r.config_set("maxmemory", 0)


def test_enqueue_is_refused_whole_when_redis_is_out_of_memory(
    r: redis.Redis, scripts: Scripts, run_out_of_memory: Callable[[], None]
) -> None:
    run_out_of_memory()

    with pytest.raises(redis.exceptions.OutOfMemoryError):
        scripts.enqueue(request(), J1, now_ms=T0)

    assert r.exists(K.job(J1), K.pending, K.seq, K.wake) == 0


def test_workers_drain_the_queue_when_redis_is_out_of_memory(
    r: redis.Redis, scripts: Scripts, run_out_of_memory: Callable[[], None]
) -> None:
    enqueue(scripts, J1)
    enqueue(scripts, J2, scheduled_at=format_ms(T0 + 1))
    run_out_of_memory()

    token = claim(scripts, J1).token
    assert scripts.complete(J1, token, now_ms=T0).code is Code.DONE
    assert scripts.promote(now_ms=T0 + 1).scheduled == [J2]
    assert scripts.claim("w1", now_ms=T0 + 1) is not None


def test_ensure_loaded_reloads_scripts_after_the_cache_was_flushed(
    r: redis.Redis, scripts: Scripts
) -> None:
    assert scripts.ensure_loaded() is True  # the fixture loaded them

    r.script_flush()  # what a Redis restart or failover does to the cache

    assert scripts.ensure_loaded() is False
    assert scripts.ensure_loaded() is True
