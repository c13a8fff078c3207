"""Start the workerd supervisor: ``python -m workerd``."""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import logging
import os
import shutil
import sys
import tempfile
import textwrap

from shared.engine.redis_checks import refuse_cluster_node_behind_plain_url
from shared.model.schedules import Schedule, ScheduleError, load_file
from shared.obs import log as logsetup
from shared.obs.multiproc import MULTIPROC_ENV, prepare_multiprocess_dir
from shared.settings.config import VARIABLES, Settings, load_or_exit, redact_url
from taskforge.version import __version__
from workerd import reload

log = logging.getLogger("workerd")
NO_HANDLERS = (
    "workerd: no handler modules: set TASKFORGE_HANDLERS to your handler modules "
    "(comma-separated, e.g. TASKFORGE_HANDLERS=myapp.tasks); "
    "TASKFORGE_HANDLERS=workerd.demo runs the demo handlers"
)
# The variables --help shows; every other one is in `python -m shared.settings.config --markdown`.
HELP_VARIABLES = (
    "TASKFORGE_HANDLERS",
    "REDIS_URL",
    "WORKER_COUNT",
    "WORKER_THREADS",
    "WORKER_PREFETCH",
    "WORKER_BATCH",
    "WORKER_QUEUES",
    "TASKFORGE_SCHEDULES",
    "PORT_WORKER",
    "TASKFORGE_BIND_HOST",
    "WORKER_DRAIN_GRACE",
    "LOG_LEVEL",
)
DESCRIPTION = """\
Run TaskForge's worker daemon: a supervisor that forks WORKER_COUNT worker processes (each
claims jobs from Redis and runs the handler registered for the job's type, WORKER_THREADS
at once), a scheduler (due and retrying jobs, expired leases, retention) and an HTTP server
for /health, /ready and /metrics. Settings come from the environment only."""
SIGNALS = """\
signals:
  TERM, INT  drain: stop claiming, let running jobs finish for up to WORKER_DRAIN_GRACE,
             put the rest back to pending (not counted against them), exit 0; a second
             one ends the grace at once
  HUP        reload: check that the handler modules import (if not, log reload_failed and
             keep running), drain as above, then re-exec in place (same pid, same port)
             with freshly imported code
  TSTP       quiet: running jobs finish, nothing more is claimed until CONT (or
             POST /workers/<name>/resume); the scheduler and leases carry on
  CONT       resume claiming after TSTP (or POST /workers/<name>/quiet)

exit codes:
  0  stopped cleanly; or --help, --version, or --check-config found nothing wrong
  2  configuration error: a bad variable, TASKFORGE_HANDLERS unset, a handler module that
     does not import, a job type registered by two handlers, a bad schedule in
     TASKFORGE_SCHEDULES, the port in use, or a bad command line
  3  halted: child processes kept dying before they were up"""


def version() -> str:
    """Return TaskForge's version: the one the checkout's client carries (taskforge/version.py),
    as the server runs from that checkout."""
    return __version__


def _variables_help() -> str:
    by_name = {var.env: var for var in VARIABLES}
    lines = [
        "main environment variables (all of them: python -m shared.settings.config --markdown):"
    ]
    for name in HELP_VARIABLES:
        var = by_name[name]
        text = f"{var.meaning} (default {var.default})" if var.default else var.meaning
        indent = " " * 23
        lines.append(
            textwrap.fill(text, 92, initial_indent=f"  {name:<20} ", subsequent_indent=indent)
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line: --help, --version, --check-config; anything else exits 2."""
    invoked_as = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    parser = argparse.ArgumentParser(
        prog="python -m workerd" if invoked_as in ("__main__.py", "") else invoked_as,
        description=DESCRIPTION,
        epilog=f"{_variables_help()}\n\n{SIGNALS}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"taskforge {version()}",
        help="print the version and exit",
    )
    parser.add_argument(
        "--check-config",
        action="store_true",
        help="check the settings and import the handler modules, then exit (0 fine, 2 not)",
    )
    return parser.parse_args(argv)


def import_handlers(modules: tuple[str, ...]) -> None:
    """Import the handler modules before forking, so every worker inherits the registry."""
    from workerd.handler_registry import DuplicateJobType

    for module in modules:
        try:
            importlib.import_module(module)
        except DuplicateJobType as exc:
            # Not this module's fault alone: the message names both registrations.
            print(f"workerd: TASKFORGE_HANDLERS={','.join(modules)}: {exc}", file=sys.stderr)
            sys.exit(2)
        except Exception as exc:  # any import failure is a configuration error: say which
            print(
                f"workerd: cannot import handler module {module!r}: {describe(exc)}",
                file=sys.stderr,
            )
            sys.exit(2)


def describe(exc: BaseException) -> str:
    """Return an import failure as a reader wants it: file and line for a syntax error."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}: {type(exc).__name__}: {exc.msg}"
    return f"{type(exc).__name__}: {exc}"


def load_schedules(settings: Settings) -> tuple[Schedule, ...]:
    """Read TASKFORGE_SCHEDULES's file; a bad one exits 2 with one line naming the schedule."""
    if not settings.schedules_file:
        return ()
    try:
        return load_file(settings.schedules_file)
    except ScheduleError as exc:
        print(f"workerd: TASKFORGE_SCHEDULES: {exc}", file=sys.stderr)
        sys.exit(2)


def describe_schedules(schedules: tuple[Schedule, ...]) -> str:
    """Return --check-config's line about the periodic schedules."""
    if not schedules:
        return "workerd: no periodic schedule (TASKFORGE_SCHEDULES unset)"
    described = [
        f"{s.name} ({f'cron {s.cron!r} {s.timezone}' if s.cron else f'every {s.every_text}'}, "
        f"{s.job.type} on {s.job.queue}, missed={s.missed})"
        for s in schedules
    ]
    return f"workerd: {len(schedules)} periodic schedules: {'; '.join(described)}"


def check_config(settings: Settings) -> int:
    """Read the schedules and import the handler modules without touching the live metrics
    directory; say what was found and return 0 (a failure exits 2 on the way)."""
    for warning in settings.warnings:  # replaced values (WORKER_COUNT=abc) are worth a word
        print(f"workerd: warning: {warning}", file=sys.stderr)
    schedules = load_schedules(settings)
    # A handler module may import prometheus_client, which writes per-process files into
    # PROMETHEUS_MULTIPROC_DIR: keep this process's files out of a running workerd's.
    with tempfile.TemporaryDirectory(prefix="taskforge-workerd-check-") as scratch:
        os.environ[MULTIPROC_ENV] = scratch
        import_handlers(settings.handlers)
    from workerd.handler_registry import registered_types

    print(
        f"workerd: configuration ok; handler modules {', '.join(settings.handlers)} import "
        f"and register: {', '.join(registered_types()) or '(no job type)'}"
    )
    # Routing (docs/QUEUES.md): a job of another type is left to a host that runs it.
    print(
        f"workerd: takes these types from queues {settings.worker_queues.describe()}; "
        "a job of another type is left to a live host that runs it (or, if none does, "
        "taken and failed as NoHandler)"
    )
    print(describe_schedules(schedules))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Configure, load handlers, bind the observability port, and run the supervisor."""
    args = parse_args(argv)
    inherited_fd, generation = reload.inherited()
    quiet = reload.inherited_quiet()
    settings = load_or_exit()
    if not settings.handlers:
        # A workerd without handlers would claim every job and fail it.
        print(NO_HANDLERS, file=sys.stderr)
        return 2
    if args.check_config:
        return check_config(settings)
    refuse_cluster_node_behind_plain_url(settings)
    schedules = load_schedules(settings)
    logsetup.configure("workerd", settings.log_level)
    # A fatal signal (a C extension's SIGSEGV) prints every thread's Python stack to stderr;
    # its children inherit it over fork.
    faulthandler.enable()
    own_metrics_dir = not os.environ.get(MULTIPROC_ENV)
    metrics_dir = os.environ.get(MULTIPROC_ENV) or tempfile.mkdtemp(prefix="taskforge-workerd-")
    prepare_multiprocess_dir(metrics_dir, wipe=True)
    import_handlers(settings.handlers)

    from workerd.obs_server import bind, listens_beyond_loopback  # imports prometheus_client: after
    from workerd.supervisor import Supervisor  # the metrics directory is set

    for warning in settings.warnings:
        log.warning("config_warning", extra={"warning": warning})
    if settings.redis_url_defaulted:
        log.warning("redis_url_defaulted", extra={"redis_url": redact_url(settings.redis_url)})
    address = f"{settings.bind_host}:{settings.port_worker}"
    try:
        listener = bind(settings.bind_host, settings.port_worker, inherited_fd=inherited_fd)
    except OSError as exc:
        print(f"workerd: cannot listen on {address}: {exc}", file=sys.stderr)
        return 2
    if listens_beyond_loopback(listener):
        log.warning(
            "config_warning",
            extra={
                "warning": f"workerd serves /metrics, /health and /ready unauthenticated on "
                f"{address}, reachable beyond this machine; TASKFORGE_BIND_HOST=127.0.0.1 "
                "keeps them local"
            },
        )
    supervisor = Supervisor(
        settings,
        listener=listener,
        generation=generation,
        reloaded=inherited_fd is not None,
        quiet=quiet,
        schedules=schedules,
    )
    try:
        code = supervisor.run()
        if code == 0 and supervisor.reloading:
            if own_metrics_dir:  # the new image makes its own
                shutil.rmtree(metrics_dir, ignore_errors=True)
            error = reload.reexec(
                listener.socket.fileno(), supervisor.generation, quiet=supervisor.quiet
            )
            log.error("reload_failed", extra={"reason": f"cannot re-exec: {error}"})
            return 1
        return code
    finally:
        listener.server_close()
        if own_metrics_dir:
            shutil.rmtree(metrics_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
