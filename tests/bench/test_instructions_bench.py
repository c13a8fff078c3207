"""bench.instructions --definitions: the probe texts it counts (valgrind itself is not needed)."""

from __future__ import annotations

from pathlib import Path

import redis

from bench.instructions import HOT_SCRIPTS, definitions_alone

ROOT = Path(__file__).resolve().parents[2]


def test_each_hot_script_probe_is_its_definitions_then_return(r: redis.Redis) -> None:
    for name in HOT_SCRIPTS:
        probes = definitions_alone(ROOT, name)
        assert len(probes["assembled"]) < len(probes["whole"])
        for text in probes.values():
            assert text.startswith("#!lua") and text.endswith("\nreturn 1\n")
            # Loads and runs: a probe that failed would count an error reply, not the chunk.
            sha = r.script_load(text)
            assert r.evalsha(sha, 14, *[f"{{ns:q}}:k{i}" for i in range(14)], *"0123456789") == 1
