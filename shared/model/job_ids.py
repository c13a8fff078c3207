"""Job ids that name their queue: a UUIDv4 whose first 32 bits are a hash of the queue's name.

A job's keys sit in its queue's Redis Cluster slot, so an operation by id (GET /jobs/<id>,
cancel, replay) must learn the queue first. The id carries a 32-bit tag of it in its first
eight hex digits (a v4 UUID's ``time_low``, which v4 fills at random anyway), and the global
slot maps each tag to the queues that have it (shared.engine.keys ``queue_tag``, written with the list
of queues, shared.read.directory): a lookup is one read of that map and one of the job, whatever the
number of queues. An id whose tag no queue has (not one of ours) is answered "not found" after
the first read.

Client ids: a producer may choose a job's id (``POST /enqueue``'s ``id``), so that a retried
enqueue finds the job its first try made instead of making a second. Such an id is a UUID of
version 8 (RFC 9562's vendor-specific layout), never 4: every id the server derives (a random
one here, a periodic tick's from its schedule and time, shared.model.ticks) is a v4, so no
client can take a future tick's id, however predictable. It carries its queue's tag like any
other, so the one job → queue lookup finds it, and the engine refuses one whose tag is not its
queue's. Its other 90 bits are the client's: random ones (taskforge.client) collide as above.

What stays random: 90 bits (122 of v4 less the 32 of the tag), so ids made in one queue
collide with probability about n²/2⁹¹ (10¹² ids: about 10⁻³). Two queue names share a tag
with probability about q²/2³³ (10,000 queues: about 1 %), which the map handles: a tag maps to
a set of names, and a lookup tries each.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from collections.abc import Sequence

TAG_HEX_DIGITS = 8  # the first group of the UUID's text
# A client's job id: version 8, variant 10, lower case (the gateway lowers one given in upper).
CLIENT_ID_PATTERN = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
)
# How long a client's id is remembered after its job finished, at least (a live job keeps it
# anyway): the retention trim keeps such a job this long (trim.lua), whatever its caps. Over
# twice the Python client's retry window for one enqueue (taskforge.client
# ENQUEUE_RETRY_WINDOW, 120 s), so a resend that sat in a gateway's backlog still finds it.
CLIENT_ID_MEMORY_MS = 5 * 60 * 1000


@functools.lru_cache(maxsize=4096)
def queue_tag(queue: str) -> str:
    """Return the 8 hex digits every job id of `queue` begins with."""
    return hashlib.blake2b(queue.encode(), digest_size=TAG_HEX_DIGITS // 2).hexdigest()


def tag_of(job_id: str) -> str:
    """Return the queue tag of a job id (its first 8 hex digits)."""
    return job_id[:TAG_HEX_DIGITS]


def tagged_uuid(queue: str, bits: bytes, version: int = 4) -> str:
    """Return a UUID (RFC 9562 layout, v4 unless told) of 16 bytes of `bits`, its first four
    the queue's tag."""
    raw = bytearray(bits[:16])
    raw[6] = (raw[6] & 0x0F) | (version << 4)
    raw[8] = (raw[8] & 0x3F) | 0x80  # variant 10
    text = queue_tag(queue) + raw[4:].hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def new_job_ids(queues: Sequence[str]) -> list[str]:
    """Return one fresh job id for each of `queues` (in order), from one read of the OS's RNG."""
    # uuid.uuid4() makes a system call per id: one read serves a whole batch.
    entropy = os.urandom(16 * len(queues))
    return [tagged_uuid(queue, entropy[16 * i : 16 * i + 16]) for i, queue in enumerate(queues)]


def new_job_id(queue: str) -> str:
    """Return one fresh job id of `queue`."""
    return new_job_ids([queue])[0]


def new_client_id(queue: str) -> str:
    """Return a fresh client job id (version 8) of `queue`, as a producer makes one."""
    return tagged_uuid(queue, os.urandom(16), version=8)


def client_id_problem(job_id: str, queue: str) -> str | None:
    """Return why `job_id` cannot be a client's id of a job in `queue`, or None when it can."""
    if not CLIENT_ID_PATTERN.fullmatch(job_id):
        return (
            "must be a UUID of version 8 (xxxxxxxx-xxxx-8xxx-[89ab]xxx-xxxxxxxxxxxx, hex), "
            "its first 8 hex digits its queue's tag"
        )
    if tag_of(job_id) != queue_tag(queue):
        return (
            f"must begin with {queue_tag(queue)}, the tag of queue {queue!r} (BLAKE2b of its UTF-8 name, "
            "4-byte digest), so that a lookup by id finds its queue"
        )
    return None
