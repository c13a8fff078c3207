"""shared.engine.lua_source: a script gets the include definitions it uses, and only those."""

from __future__ import annotations

from importlib import resources

import pytest

from shared.engine.lua_source import WORD, assemble, code_of, definitions
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
