"""Set up prometheus_client's multiprocess directory — before prometheus_client is imported.

prometheus_client chooses how it stores values when it is first imported, so this module must
not import it (nor import shared.metrics, which does).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


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
