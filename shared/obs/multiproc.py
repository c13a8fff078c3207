"""Set up prometheus_client's multiprocess directory — before prometheus_client is imported.

prometheus_client chooses how it stores values when it is first imported, so this module must
not import it (nor import shared.obs.metrics, which does).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# The directory private_multiprocess_dir made in this process. Module state, not the caller's:
# gunicorn runs its config file afresh on every reload, and this module outlives those runs.
_private: Path | None = None


def prepare_multiprocess_dir(path: str | os.PathLike[str], *, wipe: bool) -> Path:
    """Point prometheus_client at a per-server directory; wipe it when the server starts."""
    if "prometheus_client" in sys.modules and not os.environ.get(MULTIPROC_ENV):
        raise RuntimeError(
            "prometheus_client was imported before its multiprocess directory was set"
        )
    directory = Path(path)
    if wipe and directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True, exist_ok=True)
    os.environ[MULTIPROC_ENV] = str(directory)
    return directory


def private_multiprocess_dir(prefix: str) -> Path:
    """Return a fresh directory of this process's own under the temp dir (made on first call)."""
    global _private
    if _private is None:
        _private = Path(tempfile.mkdtemp(prefix=prefix, suffix="-metrics"))
    return _private


def is_private_multiprocess_dir(path: str | os.PathLike[str]) -> bool:
    """Return whether `path` is the directory private_multiprocess_dir made."""
    return _private is not None and Path(path) == _private


def remove_private_multiprocess_dir() -> None:
    """Remove the directory private_multiprocess_dir made, if any; a user's directory stays."""
    global _private
    if _private is not None:
        shutil.rmtree(_private, ignore_errors=True)
        _private = None
