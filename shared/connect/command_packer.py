"""Pack a command for the wire in one C call: redis-py's own hiredis packer, less its per-argument
Python pass.

redis-py (with hiredis, which requirements.txt installs) already packs a command with
``hiredis.pack_command``, but first runs every argument through its Python encoder and scans the
arguments for memoryviews: for complete.lua's 27 arguments that pass costs 15 µs of the 17 a
call pays to pack, on the one round trip a busy worker makes per job (bench.job_parts). hiredis
takes str (as UTF-8, strictly, as redis-py's default encoder does), bytes, int and float itself
and gives the same bytes (tests/test_command_packer.py compares them); anything else —
a bool or None, which redis-py refuses with DataError, a bytearray — raises TypeError there and
goes to redis-py's packer unchanged, as does a command name with a space in it ("SCRIPT
LOAD"), which redis-py splits into words. hiredis 3.5 also takes a memoryview: a contiguous one
as its bytes, but a strided one (``view[::2]``) as the start of the buffer under it, where
redis-py would refuse it. The engine never passes a memoryview, and looking for one would cost
the per-argument pass this module exists to avoid.

Handed to every connection as redis-py's documented ``command_packer`` option
(shared.connect.redis_conn) on one Redis and under Sentinel; a Cluster's nodes keep
redis-py's packer.
"""

from __future__ import annotations

from typing import Any

import hiredis
from redis.connection import Connection


class CommandPacker:
    """Packs a command with hiredis at once; hands what hiredis refuses to redis-py's packer."""

    def __init__(self) -> None:
        # redis-py's own packer, as a connection given no packer and no encoding options builds
        # it (ours are given none), reached through its public pack_command: the serializer
        # classes behind it change their constructors between redis-py versions (7.1's
        # HiredisRespSerializer takes no arguments). Never connected.
        self._redis_py = Connection()

    def pack(self, *args: Any) -> list[bytes]:
        """Return the command as redis-py's packer would: a list of one bytes chunk."""
        name = args[0]
        if (b" " if isinstance(name, bytes) else " ") not in name:
            try:
                return [hiredis.pack_command(args)]
            except TypeError:
                pass  # a type only redis-py's encoder takes, or refuses with its own error
        return self._redis_py.pack_command(*args)
