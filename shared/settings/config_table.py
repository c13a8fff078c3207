"""docs/CONFIGURATION.md's table: every variable any TaskForge program reads, and who reads it.

``shared.settings.config.VARIABLES`` is what Settings parses; this table places each of them in a section
and names its readers, and adds the variables read outside Settings: by gunicorn's config file,
the tracing and metrics set-up, systemd's notify protocol, and the bin/ scripts.
tests/test_config.py scans the source for environment reads and fails when a variable read is
missing here or a variable here is read nowhere. ``python -m shared.settings.config --markdown`` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.settings.config import VARIABLES

# Reader names. A reader is a program, so the table says who acts on a value; the test maps
# each source file to the readers that run it (shared/ runs in both the gateway and workerd).
GATEWAY = "gateway"
WORKERD = "workerd"
GUNICORN_CONF = "deploy/gunicorn.conf.py"
BIN_RUN = "bin/run"
BIN_TEST = "bin/test"


@dataclass(frozen=True)
class Setting:
    """A row for a variable in VARIABLES: its default and meaning come from there."""

    env: str
    read_by: tuple[str, ...]
    note: str = ""  # appended to the meaning: what readers outside Settings do with it


@dataclass(frozen=True)
class External:
    """A row for a variable read outside Settings; ``default`` is written as it is shown."""

    env: str
    default: str
    meaning: str
    read_by: tuple[str, ...]


@dataclass(frozen=True)
class Section:
    """A titled part of the configuration table."""

    title: str
    rows: tuple[Setting | External, ...]
    footnote: str = ""


_BOTH = (GATEWAY, WORKERD)

# fmt: off
# A table: one row per variable reads better than the formatter's one argument per line.
SECTIONS: tuple[Section, ...] = (
    Section("Redis", (
        Setting("REDIS_URL", (*_BOTH, BIN_RUN),
                "when it is unset, bin/run starts a private redis-server and sets it to that"),
        Setting("REDIS_SSL_CERT_REQS", _BOTH),
        Setting("REDIS_SOCKET_TIMEOUT", _BOTH),
        Setting("REDIS_CONNECT_TIMEOUT", _BOTH),
        Setting("REDIS_SENTINEL_PASSWORD", _BOTH),
        Setting("TASKFORGE_NAMESPACE", _BOTH),
        Setting("TASKFORGE_WAIT_REPLICAS", _BOTH,
                "set it alike on the gateway and every workerd host"),
        Setting("TASKFORGE_WAIT_TIMEOUT", _BOTH,
                "the gateway's Redis reply timeout (0.75 s) grows to this plus 0.25 s"),
    )),
    Section("Gateway (HTTP)", (
        External("PORT", "(unset)",
                 "Port of the gateway when set (Heroku-style platforms and honcho set it); wins over PORT_PRODUCER",
                 (GUNICORN_CONF,)),
        Setting("PORT_PRODUCER", (GUNICORN_CONF, BIN_RUN), "PORT wins when both are set"),
        Setting("TASKFORGE_BIND_HOST", (WORKERD, GUNICORN_CONF, BIN_RUN),
                "bin/run sets 127.0.0.1 unless it is set"),
        External("WEB_CONCURRENCY", "`2`", "gunicorn worker processes of the gateway",
                 (GUNICORN_CONF,)),
        External("GUNICORN_THREADS", "`32`",
                 "Threads per gunicorn worker process for requests other than event streams and "
                 "waits; "
                 "each process runs this many plus TASKFORGE_EVENTS_STREAMS (96 by default)",
                 (GUNICORN_CONF,)),
        Setting("TASKFORGE_API_TOKEN", (GATEWAY,)),
        Setting("TASKFORGE_TRUSTED_PROXIES", (GATEWAY,)),
        Setting("TASKFORGE_AUTH_MAX_FAILURES", (GATEWAY,)),
        Setting("TASKFORGE_EVENTS_STREAMS", (GATEWAY, GUNICORN_CONF),
                "the default serves 50 streams even if all land on one process"),
        Setting("TASKFORGE_EVENTS_KEEPALIVE", (GATEWAY,)),
        Setting("TASK_IDEMPOTENCY_TTL", (GATEWAY,)),
    )),
    Section("workerd", (
        Setting("PORT_WORKER", (WORKERD, BIN_RUN)),
        Setting("WORKER_COUNT", (WORKERD,)),
        Setting("WORKER_THREADS", (WORKERD,)),
        Setting("WORKER_PREFETCH", (WORKERD,)),
        Setting("WORKER_BATCH", (WORKERD,)),
        Setting("WORKER_QUEUES", (WORKERD,)),
        Setting("TASKFORGE_HANDLERS", (WORKERD, BIN_RUN),
                "bin/run sets workerd.demo unless it is set"),
        Setting("TASKFORGE_SCHEDULES", (WORKERD,)),
        Setting("WORKER_DRAIN_GRACE", (WORKERD,)),
        Setting("WORKER_CANCEL_GRACE", (WORKERD,)),
        Setting("WORKER_HEARTBEAT_TIMEOUT", (WORKERD,)),
        Setting("WORKER_MAX_JOBS", (WORKERD,)),
        Setting("WORKER_MAX_RSS_MB", (WORKERD,)),
        External("NOTIFY_SOCKET", "(unset)",
                 "Set by systemd for Type=notify units: workerd sends READY=1, STATUS= and STOPPING=1 there",
                 (WORKERD,)),
    )),
    Section("Jobs", (
        Setting("TASK_VISIBILITY_TIMEOUT", (WORKERD,)),
        Setting("TASK_RETRY_BASE_DELAY", (WORKERD,)),
        Setting("TASK_RETRY_MAX_DELAY", (WORKERD,)),
        Setting("TASK_RETRY_JITTER", (WORKERD,)),
        Setting("TASK_MAX_RECOVERIES", (WORKERD,)),
        Setting("TASK_DEFAULT_TIMEOUT", (WORKERD,)),
        Setting("TASK_RESULT_MAX_BYTES", (WORKERD,)),
        Setting("TASK_FINISHED_RETENTION", _BOTH),
        Setting("TASK_FINISHED_MAX_JOBS", (WORKERD,)),
        Setting("TASK_DLQ_MAX_JOBS", (WORKERD,)),
        Setting("TASK_DLQ_MAX_AGE", (WORKERD,)),
        Setting("TASKFORGE_EVENTS", _BOTH),
        Setting("TASKFORGE_EVENTS_MAX", _BOTH),
    )),
    Section("Logs, metrics and traces", (
        Setting("LOG_LEVEL", (*_BOTH, GUNICORN_CONF), "gunicorn's own lines follow it too"),
        External("PROMETHEUS_MULTIPROC_DIR", "a new directory under the temp dir per start, removed at exit",
                 "Where the processes of one gateway or one workerd keep their metric files; each server empties a directory set here at start and leaves it at exit, so never share one between servers",
                 (*_BOTH, GUNICORN_CONF)),
        External("OTEL_TRACING_ENABLED", "(unset)",
                 "`true` turns OpenTelemetry tracing on, with OTEL_EXPORTER_OTLP_ENDPOINT (needs `pip install -r requirements-tracing.txt`)",
                 _BOTH),
        External("OTEL_EXPORTER_OTLP_ENDPOINT", "(unset)",
                 "OTLP/gRPC collector the spans go to, e.g. `http://localhost:4317`; tracing stays off without it",
                 _BOTH),
        External("OTEL_SERVICE_NAME", "`taskforge-producer` or `taskforge-worker`",
                 "Service name on the spans of the gateway or of workerd", _BOTH),
        External("OTEL_EXPORTER_OTLP_INSECURE", "`true`",
                 "`false` speaks TLS to the collector", _BOTH),
    ), footnote="The OpenTelemetry SDK also reads its own standard `OTEL_*` variables "
                "(e.g. `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_RESOURCE_ATTRIBUTES`)."),
    Section("bin/run and bin/test", (
        External("TASKFORGE_REDIS_PORT", "`6399`",
                 "Port of bin/run's private redis-server, bound to 127.0.0.1 (used when REDIS_URL is unset)",
                 (BIN_RUN,)),
        External("TASKFORGE_REDIS_DIR", "`var/redis`",
                 "Data directory and log of that redis-server", (BIN_RUN,)),
        External("PYTHON", "`python3`",
                 "Interpreter that creates `.venv` (3.11 or newer)", (BIN_RUN, BIN_TEST)),
        External("TASKFORGE_TEST_WORKERS", "`3`",
                 "Processes that run the tests not marked serial (pytest-xdist's `-n`); `0` runs them in pytest's own process",
                 (BIN_TEST,)),
    )),
)
# fmt: on

# Read by the bin/ scripts but not TaskForge's to document: bash's own variables.
NOT_OURS: dict[str, str] = {
    name: "set by bash itself" for name in ("BASH_SOURCE", "BASH_VERSION", "PATH", "PWD")
}


def table_rows() -> list[tuple[str, str, str, str, str]]:
    """Return (section, variable, default, meaning, readers) for every row, in table order."""
    by_env = {var.env: var for var in VARIABLES}
    rows = []
    for section in SECTIONS:
        for row in section.rows:
            if isinstance(row, Setting):
                var = by_env[row.env]
                default = f"`{var.default}`" if var.default else "(unset)"
                meaning = f"{var.meaning}; {row.note}" if row.note else var.meaning
            else:
                default, meaning = row.default, row.meaning
            rows.append((section.title, row.env, default, meaning, ", ".join(row.read_by)))
    return rows


def markdown_table() -> str:
    """Render the configuration table for docs/CONFIGURATION.md: one small table per section."""
    rows = table_rows()
    parts = []
    for section in SECTIONS:
        parts += ["", f"### {section.title}", ""]
        parts += ["| Variable | Default | Meaning | Read by |", "|---|---|---|---|"]
        parts += [
            f"| `{env}` | {default} | {meaning} | {readers} |"
            for title, env, default, meaning, readers in rows
            if title == section.title
        ]
        if section.footnote:
            parts += ["", section.footnote]
    return "\n".join(parts[1:])
