"""What every benchmark task body does, in every system: append one fixed-width line.

The line holds three wall-clock times: when the producer sent the job (0 for drain jobs),
when the task body started and when it ended. Each process (and thread) appends to its own
file in ``$BENCH_STAMP_DIR`` with one ``write`` call: no Redis round trip, so the measuring
adds nothing to the system measured, and the controller learns how many jobs ran from the
files' sizes alone. This module imports nothing but the standard library: it runs inside
every peer's virtualenv.
"""

from __future__ import annotations

import os
import threading
import time

LINE = 54  # bytes per record: three 17-character fields, two spaces, a newline
_files = threading.local()


def record(sent: float, started: float) -> None:
    """Append (sent, started, now) to this thread's stamp file."""
    fd = getattr(_files, "fd", None)
    if fd is None or _files.pid != os.getpid():
        name = f"{os.getpid()}-{threading.get_ident()}"
        path = os.path.join(os.environ["BENCH_STAMP_DIR"], name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        _files.fd, _files.pid = fd, os.getpid()
    os.write(fd, b"%17.6f %17.6f %17.6f\n" % (sent, started, time.time()))


def redis_url() -> str:
    """Return the benchmark's private Redis URL; refuse to fall back to any default Redis."""
    url = os.environ.get("BENCH_REDIS_URL")
    if not url:
        raise SystemExit("BENCH_REDIS_URL is not set: refusing to use a default Redis")
    return url
