"""Assemble a script's Lua: its file, with ``--- @include "x"`` lines replaced by what it uses.

An include (``lua/includes/x.lua``) is a sequence of top-level definitions, each with the
comment above it: ``local function name(...)`` up to an ``end`` at the start of a line, or
``local NAME, ... = value`` (a table constructor may span lines). A script gets the definitions
its own code names, and those they name in turn, in file order; nothing else. Why: every
EVALSHA runs the whole chunk, so each closure an include defines is created (and later
collected) on every call: the hot path defined about fifteen it never calls, about 5 % of
Redis's instructions per job.

A Lua error names a line of the assembled text (``user_script:<n>``), not of a file: before a
script's first include line the two agree, after it they do not. ``origin(name, n)`` answers
the file and line the assembled line came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

INCLUDE = re.compile(r'^--- @include "([a-z_]+)"$', re.MULTILINE)
FUNCTION = re.compile(r"^local function ([A-Za-z_]\w*)\(")
LOCALS = re.compile(r"^local ([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*=")
WORD = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class Definition:
    """One top-level definition of an include: the names it binds and its text."""

    names: frozenset[str]
    text: str  # with the comment lines just above it
    first_line: int = 1  # the include file's line number of its text's first line

    def uses(self) -> set[str]:
        """Return the words of its code (comments left out)."""
        return set(WORD.findall(code_of(self.text)))


def code_of(text: str) -> str:
    """Return Lua text without its comments (a `--` inside a string is not used here)."""
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def definitions(name: str, text: str) -> list[Definition]:
    """Split an include into its top-level definitions; raise on any other statement."""
    found: list[Definition] = []
    lines = text.splitlines(keepends=True)
    comments: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        stripped = line.strip()
        if not stripped or stripped.startswith("--"):
            comments = [] if not stripped else [*comments, line]
            index += 1
            continue
        function, local = FUNCTION.match(line), LOCALS.match(line)
        if function:
            end = next((i for i in range(index, len(lines)) if lines[i].rstrip() == "end"), None)
            if end is None:
                raise ValueError(f"include {name}: function {function.group(1)} has no `end`")
            names = {function.group(1)}
        elif local:
            end, depth = index, 0
            while True:
                depth += code_of(lines[end]).count("{") - code_of(lines[end]).count("}")
                if depth <= 0:
                    break
                end += 1
            names = {n.strip() for n in local.group(1).split(",")}
        else:
            raise ValueError(f"include {name}: top-level statement outside a definition: {line!r}")
        text = "".join(comments + lines[index : end + 1])
        found.append(Definition(frozenset(names), text, index + 1 - len(comments)))
        comments = []
        index = end + 1
    return found


def used(own_code: str, available: list[Definition]) -> list[Definition]:
    """Return the definitions `own_code` names, directly or through another, in file order."""
    wanted = set(WORD.findall(code_of(own_code)))
    kept: set[int] = set()
    changed = True
    while changed:
        changed = False
        for i, definition in enumerate(available):
            if i not in kept and definition.names & wanted:
                kept.add(i)
                wanted |= definition.uses()
                changed = True
    return [d for i, d in enumerate(available) if i in kept]


def assemble(name: str, shake: bool = True) -> str:
    """Return script `name` as Redis runs it: each include line replaced by what is used.

    shake=False keeps every definition of each include (for comparisons: tests, benches).
    """
    return "".join(text for text, _, _ in assembled_lines(name, shake))


def origin(name: str, line: int) -> tuple[str, int]:
    """Return (file under lua/, line) that line `line` of script `name`'s assembled text
    (as a Lua error names it: ``user_script:<line>``) came from."""
    _, path, number = assembled_lines(name)[line - 1]
    return path, number


def assembled_lines(name: str, shake: bool = True) -> list[tuple[str, str, int]]:
    """Return the assembled script's lines, each as (text, file under lua/, line in that file)."""
    lua = resources.files("shared.engine") / "lua"
    source = (lua / f"{name}.lua").read_text()
    included = {
        match: definitions(match, (lua / "includes" / f"{match}.lua").read_text())
        for match in INCLUDE.findall(source)
    }
    everything = [d for found in included.values() for d in found]
    kept = used(INCLUDE.sub("", source), everything) if shake else everything
    keep = {id(d) for d in kept}
    out: list[tuple[str, str, int]] = []
    for number, line in enumerate(source.splitlines(keepends=True), start=1):
        match = INCLUDE.fullmatch(line.rstrip("\n"))
        if match is None:
            out.append((line, f"{name}.lua", number))
            continue
        path = f"includes/{match.group(1)}.lua"
        texts = [d for d in included[match.group(1)] if id(d) in keep]
        if not texts:  # nothing used: the include line leaves an empty line
            out.append((line[len(match.group(0)) :], f"{name}.lua", number))
            continue
        for definition in texts:
            for offset, text in enumerate(definition.text.splitlines(keepends=True)):
                out.append((text, path, definition.first_line + offset))
        # The include line's own newline ends the last definition (its trailing ones dropped).
        last, path_of_last, number_of_last = out[-1]
        out[-1] = (last.rstrip("\n") + line[len(match.group(0)) :], path_of_last, number_of_last)
    return out
