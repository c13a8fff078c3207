"""shared.engine.lua_source: a script gets the include definitions it uses, and only those."""

from __future__ import annotations

import re
from importlib import resources

import pytest
import redis

from shared.engine.lua_source import WORD, assemble, code_of, definitions, origin
from shared.engine.scripts import SCRIPT_NAMES

INCLUDES = resources.files("shared.engine") / "lua" / "includes"


def defined(name: str) -> set[str]:
    """Return the include names a script's assembled source defines."""
    found = set()
    for path in INCLUDES.iterdir():
        for definition in definitions(path.name, path.read_text()):
            if definition.text in assemble(name):
                found |= definition.names
    return found


def test_the_hot_path_gets_what_it_calls_and_not_the_rest() -> None:
    names = defined("complete")
    assert {"now_ms", "claim_next", "claimed_before", "held_by", "DONE"} <= names
    assert not names & {"make_dead", "lose_worker", "remember_reply", "EMPTY", "CONFLICT"}


def test_a_definition_used_only_through_another_comes_along() -> None:
    # promote calls make_pending, which calls index_pending, which calls pending_member.
    assert {"make_pending", "index_pending", "pending_member", "wake_one"} <= defined("promote")


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_name_a_script_uses_from_an_include_is_defined_in_it(name: str) -> None:
    every = set()
    for path in INCLUDES.iterdir():
        for definition in definitions(path.name, path.read_text()):
            every |= definition.names
    words = set(WORD.findall(code_of(assemble(name))))
    assert words & every <= defined(name)


def test_every_include_is_definitions_only() -> None:
    for path in INCLUDES.iterdir():
        assert definitions(path.name, path.read_text())


def test_a_statement_outside_a_definition_is_refused() -> None:
    with pytest.raises(ValueError, match="outside a definition"):
        definitions("bad", "local function f()\n  return 1\nend\nredis.call('DEL', 'x')\n")


def test_a_table_spanning_lines_is_one_definition_with_its_comment() -> None:
    text = "-- the fields\nlocal F = {'a',\n  'b'}\n\n-- unused\nlocal G = 1\n"
    found = definitions("t", text)
    assert [d.names for d in found] == [{"F"}, {"G"}]
    assert found[0].text == "-- the fields\nlocal F = {'a',\n  'b'}\n"


LUA = resources.files("shared.engine") / "lua"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_shaking_keeps_every_name_a_script_needs(r: redis.Redis, name: str) -> None:
    # Redis compiles at SCRIPT LOAD, but a name the shaking dropped would only fail when the
    # line runs (Lua takes an unknown name for a global): so every name the script uses must
    # be defined in the shaken text wherever the unshaken text defines it.
    assert r.script_load(assemble(name))
    unshaken_words = set(WORD.findall(code_of(assemble(name, shake=False))))
    every = {
        n
        for path in INCLUDES.iterdir()
        for d in definitions(path.name, path.read_text())
        for n in d.names
    }
    words = set(WORD.findall(code_of(assemble(name))))
    assert (words & every) <= defined(name) <= unshaken_words


def test_shaking_makes_the_hot_scripts_strictly_smaller() -> None:
    for name in ("enqueue", "complete", "claim", "complete_batch"):
        assert len(assemble(name)) < len(assemble(name, shake=False))


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_assembled_line_names_the_file_line_it_came_from(name: str) -> None:
    for number, line in enumerate(assemble(name).splitlines(), start=1):
        path, at = origin(name, number)
        original = (LUA / path).read_text().splitlines()[at - 1]
        assert line == original or (line == "" and original.startswith("--- @include"))


def test_a_lua_error_inside_an_include_maps_back_to_its_file(r: redis.Redis) -> None:
    # claim.lua with an empty lease: claim_next (includes/claim.lua) adds nil to a number.
    keys = [f"{{t:q}}:{k}" for k in range(13)]
    r.zadd(keys[0], {"1:x": 0})
    r.hset("{t:q}:job:x", mapping={"status": "pending", "token": 0, "attempts": 0, "type": "t"})
    sha = r.script_load(assemble("claim"))
    args = ["{t:q}:job:", "w", "", "req", "1000", "", "10", "0"]
    with pytest.raises(redis.ResponseError) as raised:
        r.evalsha(sha, len(keys), *keys, *args)
    line = int(re.search(r"user_script:(\d+):", str(raised.value)).group(1))
    path, at = origin("claim", line)
    assert path == "includes/claim.lua"
    assert "now + lease" in (LUA / path).read_text().splitlines()[at - 1]
