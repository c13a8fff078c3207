"""The upgrade's script files: flags line, headers that name every key, argument and code, and
wrappers that pass as many as the headers say; the vendored v1 scripts are v1's."""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest
import redis

from shared.lua_source import WORD, assemble, definitions
from shared.lua_source import code_of as lua_code_of
from shared.upgrade import SCRIPT_NAMES, Upgrade
from tests.engine.test_codes import RETURNED_CODE, code_of, header, slots, source, uncommented
from tests.engine.test_codes import variadic as first_of_range
from tests.test_lua_source import INCLUDES, defined
from tests.upgrade.conftest import NOW, World
from tests.upgrade.v1_source import DIRECTORY, ROOT, V1_COMMIT, V1_SCRIPTS, assemble_v1


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_upgrade_script_opens_with_a_flags_line_and_a_header_naming_it(name: str) -> None:
    first = source(name).splitlines()[0]

    assert first == "#!lua flags=allow-oom"  # it moves jobs that exist, as the others do
    assert header(name).startswith(f"-- {name}: ")


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_upgrade_script_header_names_each_key_argument_and_code_it_uses(name: str) -> None:
    code = code_of(name)
    documented, used = slots(header(name)), slots(code)

    for table in ("KEYS", "ARGV"):
        assert used[table] <= documented[table], f"{table} used but not in the header"
        assert documented[table] <= used[table] | {first_of_range(header(name))[table]}, (
            f"{table} in the header but never used"
        )
    own_code = uncommented(source(name))
    returned = {
        code
        for line in own_code.splitlines()
        if re.search(r"\breturn\b", line)
        for code in RETURNED_CODE.findall(line)
    }
    assert returned <= set(RETURNED_CODE.findall(header(name)))


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_name_an_upgrade_script_uses_from_an_include_is_defined_in_it(name: str) -> None:
    every = set()
    for path in INCLUDES.iterdir():
        for definition in definitions(path.name, path.read_text()):
            every |= definition.names
    words = set(WORD.findall(lua_code_of(assemble(name))))
    assert words & every <= defined(name)


def test_the_wrappers_pass_as_many_keys_and_arguments_as_the_headers_name(
    r: redis.Redis, world: World, upgrade: Upgrade, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: dict[str, tuple[int, int]] = {}
    call = upgrade._call

    def record(name: str, keys: list[str], args: list[Any]) -> Any:
        sent[name] = (len(keys), len(args))
        return call(name, keys, args)

    monkeypatch.setattr(upgrade, "_call", record)
    upgrade.run(now_ms=NOW)

    assert set(sent) == set(SCRIPT_NAMES)
    for name, counts in sent.items():
        text = header(name)
        for table, count in zip(("KEYS", "ARGV"), counts, strict=True):
            start = first_of_range(text)[table]
            if start is None:
                assert count == max(slots(text)[table], default=0), (name, table)
            else:
                assert count >= start, (name, table)


def _has_v1_commit() -> bool:
    found = subprocess.run(
        ["git", "cat-file", "-e", f"{V1_COMMIT}^{{commit}}"], cwd=ROOT, capture_output=True
    )
    return found.returncode == 0


@pytest.mark.skipif(not _has_v1_commit(), reason=f"git history without {V1_COMMIT} (shallow)")
@pytest.mark.parametrize("name", V1_SCRIPTS)
def test_the_vendored_v1_scripts_are_those_v1_ran(name: str) -> None:
    assert (DIRECTORY / f"{name}.lua").read_text() == assemble_v1(name)
