"""Start the workerd supervisor: ``python -m workerd`` (or ``taskforge-workerd``)."""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import sys
import tempfile

from shared import log as logsetup
from shared.config import load_or_exit, redact_url
from shared.multiproc import MULTIPROC_ENV, prepare_multiprocess_dir

log = logging.getLogger("workerd")
DEFAULT_HANDLERS = ("workerd.demo",)


def import_handlers(modules: tuple[str, ...]) -> None:
    """Import the handler modules before forking, so every worker inherits the registry."""
    for module in modules or DEFAULT_HANDLERS:
        try:
            importlib.import_module(module)
        except Exception as exc:  # any import failure is a configuration error: say which
            print(f"workerd: cannot import handler module {module!r}: {exc!r}", file=sys.stderr)
            sys.exit(2)


def main() -> int:
    """Configure, load handlers, bind the observability port, and run the supervisor."""
    settings = load_or_exit()
    logsetup.configure("workerd", settings.log_level)
    own_metrics_dir = not os.environ.get(MULTIPROC_ENV)
    metrics_dir = os.environ.get(MULTIPROC_ENV) or tempfile.mkdtemp(prefix="taskforge-workerd-")
    prepare_multiprocess_dir(metrics_dir, wipe=True)
    import_handlers(settings.handlers)

    from workerd.obs import bind  # imports prometheus_client: only after the directory is set
    from workerd.supervisor import Supervisor

    for warning in settings.warnings:
        log.warning("config_warning", extra={"warning": warning})
    if settings.redis_url_defaulted:
        log.warning("redis_url_defaulted", extra={"redis_url": redact_url(settings.redis_url)})
    try:
        listener = bind("0.0.0.0", settings.port_worker)
    except OSError as exc:
        print(f"workerd: cannot listen on port {settings.port_worker}: {exc}", file=sys.stderr)
        return 2
    try:
        return Supervisor(settings, listener=listener).run()
    finally:
        listener.server_close()
        if own_metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
