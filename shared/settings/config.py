"""Read TaskForge's settings from the environment into one frozen dataclass.

One table, ``VARIABLES``, drives the parsing and its rows of docs/CONFIGURATION.md's table
(``python -m shared.settings.config --markdown``), so the two cannot drift apart. shared/settings/config_table.py
adds the variables other code reads directly (gunicorn's config, tracing, bin/run) and who reads
each; tests/test_config.py holds it to the environment reads it finds in the source.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn
from urllib.parse import urlsplit

from shared.model.durations import duration_parser
from shared.model.queues import DEFAULT_QUEUE, QueuePlan, is_queue_name, parse_worker_queues
from shared.settings.cluster_url import is_cluster_url, parse_cluster_url, split_credentials

WORKER_COUNT_DEFAULT = 3
WORKER_COUNT_MAX = 512
WORKER_THREADS_DEFAULT = 1
WORKER_THREADS_MAX = 64
WORKER_BATCH_MAX = 64
# 64 per process: 50 streams (a dashboard per operator, or a load test) fit in one process even
# when all land there (gunicorn does not spread connections evenly), beside its 32 other threads.
EVENTS_STREAMS_DEFAULT = 64
EVENTS_STREAMS_MAX = 1000
# Durable mode (docs/RELIABILITY.md, "Durable mode"): replicas a write waits for, at most.
WAIT_REPLICAS_MAX = 16
# A WAIT's reply comes this long, at most, after its timeout: the write script before it and
# the round trip. The socket must wait for both, or a WAIT that times out reads as an outage.
WAIT_REPLY_MARGIN = 0.25  # seconds
REDIS_SCHEMES = ("redis", "rediss", "unix")
SENTINEL_PORT = 26379  # Sentinel's own default port: a sentinel written without one
SENTINEL_FORM = "redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db]"
# Wrong tokens from one client address within a minute before it is locked out (gateway/lockout.py).
AUTH_MAX_FAILURES_DEFAULT = 10
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
SSL_CERT_REQS = ("required", "optional", "none")

_URL_PARTS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^/?#]*)(.*)", re.DOTALL)
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*")
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


class ConfigError(Exception):
    """Raised when an environment variable holds a value TaskForge cannot use."""


class _Substitute(Exception):
    """Raised by a lenient parser: use ``value`` instead, and record ``reason`` as a warning."""

    def __init__(self, value: object, reason: str) -> None:
        super().__init__(reason)
        self.value = value
        self.reason = reason


@dataclass(frozen=True)
class Settings:
    """Every setting of a TaskForge process; build it with ``Settings.from_env()``."""

    redis_url: str
    redis_ssl_cert_reqs: str
    redis_socket_timeout: float
    redis_connect_timeout: float
    redis_sentinel_password: str | None = field(repr=False)  # a secret, like api_token
    port_producer: int
    port_worker: int
    bind_host: str
    worker_count: int
    worker_threads: int
    worker_prefetch: bool
    worker_batch: int
    visibility_timeout: float
    retry_base_delay: float
    retry_max_delay: float
    retry_jitter: float
    max_recoveries: int
    default_job_timeout: float
    result_max_bytes: int
    finished_retention: float
    finished_max_jobs: int
    dlq_max_jobs: int
    dlq_max_age: float
    idempotency_ttl: float
    drain_grace: float
    cancel_grace: float
    heartbeat_timeout: float
    worker_max_jobs: int
    worker_max_rss_mb: int
    handlers: tuple[str, ...]
    worker_queues: QueuePlan
    schedules_file: str
    namespace: str
    events: bool
    events_max: int
    api_token: str | None = field(repr=False)  # a secret: never in a repr, log or message
    events_streams: int
    events_keepalive: float
    wait_replicas: int
    wait_timeout: float
    log_level: str
    # Proxies whose X-Forwarded-For names the client (gateway/client_address.py); none by default.
    trusted_proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    auth_max_failures: int = AUTH_MAX_FAILURES_DEFAULT  # before a client address is locked out
    # True when REDIS_URL was not set, so entry points can say so in their start-up line.
    redis_url_defaulted: bool = False
    # Values that were bad but replaced rather than refused (WORKER_COUNT); log them at start.
    warnings: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Parse ``env`` (default ``os.environ``); raise ConfigError naming the bad variable."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        warnings: list[str] = []
        for var in VARIABLES:
            raw = env.get(var.env, "").strip()
            values[var.field] = var.value(raw, warnings)
        settings = cls(
            **values,
            redis_url_defaulted=not env.get("REDIS_URL", "").strip(),
            warnings=tuple(warnings),
        )
        settings.check_wait_timeout()
        settings.check_batch()
        return settings

    def check_batch(self) -> None:
        """Refuse batched claims with job threads: a thread's batch would wait behind its
        siblings' jobs and a job run alone (workerd.worker_threads), unbounded."""
        if self.worker_batch > 1 and self.worker_threads > 1:
            raise ConfigError(
                f"WORKER_BATCH={self.worker_batch} is invalid with WORKER_THREADS="
                f"{self.worker_threads}: expected WORKER_BATCH=1 or WORKER_THREADS=1 (batched "
                "claims and acknowledgements run one job at a time)"
            )

    def check_wait_timeout(self) -> None:
        """Refuse a WAIT timeout the Redis socket would cut short (then read as an outage)."""
        if self.wait_replicas and self.wait_timeout + WAIT_REPLY_MARGIN > self.redis_socket_timeout:
            raise ConfigError(
                f"TASKFORGE_WAIT_TIMEOUT={self.wait_timeout:g}s is invalid: expected at most "
                f"REDIS_SOCKET_TIMEOUT ({self.redis_socket_timeout:g}s) minus "
                f"{WAIT_REPLY_MARGIN:g}s, so a WAIT that times out is answered before the "
                "socket gives up"
            )


@dataclass(frozen=True)
class Variable:
    """One environment variable: its Settings field, default (as text), meaning and parser."""

    env: str
    field: str
    default: str
    meaning: str
    parse: Callable[[str], Any]
    secret: bool = False

    def value(self, raw: str, warnings: list[str]) -> Any:
        """Return the parsed value of ``raw`` (empty means unset: the default applies)."""
        if not raw:
            return self.parse(self.default)
        shown = "(hidden)" if self.secret else repr(redact_url(raw))
        try:
            return self.parse(raw)
        except _Substitute as sub:
            warnings.append(f"{self.env}={shown} {sub.reason}")
            return sub.value
        except ValueError as exc:
            raise ConfigError(f"{self.env}={shown} is invalid: expected {exc}") from None


def _integer(low: int, high: int | None = None) -> Callable[[str], int]:
    """Return a parser of a decimal integer in ``low..high`` (no upper bound when None)."""
    expected = f"an integer {low}..{high}" if high is not None else f"an integer ≥ {low}"

    def parse(text: str) -> int:
        if not re.fullmatch(r"[+-]?\d+", text):
            raise ValueError(expected)
        number = int(text)
        if number < low or (high is not None and number > high):
            raise ValueError(expected)
        return number

    return parse


def _choice(options: tuple[str, ...], *, upper: bool = False) -> Callable[[str], str]:
    """Return a case-insensitive parser of one of ``options``."""

    def parse(text: str) -> str:
        value = text.upper() if upper else text.lower()
        if value not in options:
            raise ValueError("one of " + ", ".join(options))
        return value

    return parse


def _worker_count(text: str) -> int:
    """Parse WORKER_COUNT leniently: a bad value falls back to 3 (or the cap) with a warning.

    Unlike every other variable, whose bad value stops the process: a mistyped worker count
    still leaves the host serving the queue at the default size, and the start-up warning
    names the value. TaskForge's Go original treated WORKER_COUNT the same way.
    """
    try:
        count = _integer(1)(text)
    except ValueError:
        raise _Substitute(
            WORKER_COUNT_DEFAULT,
            f"is not an integer ≥ 1; using {WORKER_COUNT_DEFAULT}",
        ) from None
    if count > WORKER_COUNT_MAX:
        raise _Substitute(WORKER_COUNT_MAX, f"is above the cap of {WORKER_COUNT_MAX}; using it")
    return count


def _fraction(text: str) -> float:
    """Parse a number in 0..1."""
    expected = "a number from 0 to 1"
    try:
        number = float(text)
    except ValueError:
        raise ValueError(expected) from None
    if not 0.0 <= number <= 1.0:  # also refuses nan
        raise ValueError(expected)
    return number


@dataclass(frozen=True)
class SentinelTarget:
    """Where a Sentinel URL says the primary is found, and how to log in to it.

    ``redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db]``: the hosts
    are the sentinels (port 26379 when left out), ``service`` the name they monitor the primary
    under, and the user, password and db those of the primary and replicas, as in a redis://
    URL. ``rediss+sentinel://`` speaks TLS to the sentinels and the data nodes alike.
    """

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int
    username: str | None
    password: str | None = field(repr=False)
    tls: bool


_SENTINEL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9.-]*\+sentinel://")
_SENTINEL_URL = re.compile(r"(rediss?)\+sentinel://([^/?#]*)/([^?#]*)", re.DOTALL)
_SENTINEL_HOST = re.compile(r"(?:\[([0-9A-Fa-f:.]+)\]|([^:\[\]]+))(?::(\d{1,5}))?")
_SERVICE = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def sentinel_target(url: str) -> SentinelTarget | None:
    """Return what a Sentinel URL names, None for any other URL; ValueError if it is malformed."""
    if not _SENTINEL_SCHEME.match(url):
        return None
    match = _SENTINEL_URL.fullmatch(url)
    if match is None:
        raise ValueError(f"a Sentinel URL {SENTINEL_FORM} (no query string)")
    scheme, authority, path = match.groups()
    username, password, hosts = split_credentials(authority)
    sentinels = tuple(_sentinel_address(host) for host in hosts.split(","))
    service, _, db = path.partition("/")
    if not _SERVICE.fullmatch(service):
        raise ValueError(f"a Sentinel URL whose path names the service: {SENTINEL_FORM}")
    if db and not re.fullmatch(r"\d{1,5}", db):
        raise ValueError(f"a Sentinel URL whose db is a number: {SENTINEL_FORM}")
    return SentinelTarget(sentinels, service, int(db or 0), username, password, scheme == "rediss")


def _sentinel_address(text: str) -> tuple[str, int]:
    match = _SENTINEL_HOST.fullmatch(text)
    port = int(match[3]) if match and match[3] else SENTINEL_PORT
    if match is None or not 1 <= port <= 65535:
        raise ValueError(f"a Sentinel URL of host:port sentinels: {SENTINEL_FORM}")
    host = match[1] or match[2]
    try:
        _host(host)
    except ValueError:
        raise ValueError(f"a Sentinel URL of host:port sentinels: {SENTINEL_FORM}") from None
    return host, port


def _redis_url(text: str) -> str:
    """Accept a redis://, rediss:// or unix:// URL, a Sentinel URL (SentinelTarget), or a
    redis+cluster:// one (a Redis Cluster, shared.settings.cluster_url)."""
    if sentinel_target(text) is not None:
        return text
    if is_cluster_url(text):
        parse_cluster_url(text)  # ValueError names the expected form
        return text
    expected = (
        f"a redis://, rediss:// or unix:// URL, {SENTINEL_FORM}, "
        "or redis+cluster://host:port[,host:port...]"
    )
    try:
        parts = urlsplit(text)
        _ = parts.port  # raises ValueError on a non-numeric or out-of-range port
    except ValueError:
        raise ValueError(expected) from None
    if parts.scheme not in REDIS_SCHEMES:
        raise ValueError(expected)
    if parts.scheme == "unix" and not parts.path:
        raise ValueError("a unix:// URL with a socket path, e.g. unix:///run/redis.sock")
    return text


def _host(text: str) -> str:
    """Accept an IP address (v4 or v6) or a hostname to listen on."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        pass
    labels = text.rstrip(".").split(".")
    if len(text) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        raise ValueError("an IP address or a hostname, e.g. 127.0.0.1 or 0.0.0.0")
    return text


def _handlers(text: str) -> tuple[str, ...]:
    """Parse a comma-separated list of importable module names."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    for name in names:
        if not all(part.isidentifier() for part in name.split(".")):
            raise ValueError("comma-separated module names, e.g. myapp.tasks,workerd.demo")
    return names


def _namespace(text: str) -> str:
    """Accept a key namespace: it sits inside every key's hash tag (shared.engine.keys)."""
    if not is_queue_name(text):
        raise ValueError("1-64 characters of A-Z a-z 0-9 _ . -, e.g. taskforge")
    return text


def _on_off(text: str) -> bool:
    """Parse a switch: on or off (any case)."""
    return _choice(("on", "off"))(text) == "on"


def _networks(text: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Parse comma-separated IP addresses and CIDR networks (empty: none)."""
    networks = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(
                "comma-separated IP addresses or CIDR networks, e.g. 10.0.0.5,192.168.0.0/16"
            ) from None
    return tuple(networks)


def _token(text: str) -> str | None:
    """Return the API token, or None when unset."""
    return text or None


# fmt: off
# A table: one row per variable reads better than the formatter's one argument per line.
VARIABLES: tuple[Variable, ...] = (
    Variable("REDIS_URL", "redis_url", "redis://localhost:6379/0",
             "Redis to use: redis://, rediss:// (TLS) or unix://; or the primary Sentinel names, "
             f"{SENTINEL_FORM} (rediss+sentinel:// for TLS; docs/SENTINEL.md); or a Redis "
             "Cluster, redis+cluster://host:port[,host:port...] (rediss+cluster:// for TLS; "
             "docs/CLUSTER.md)", _redis_url),
    Variable("REDIS_SSL_CERT_REQS", "redis_ssl_cert_reqs", "required",
             "TLS certificate check for rediss://: required, optional or none (a self-signed certificate, as on Heroku, needs none)",
             _choice(SSL_CERT_REQS)),
    Variable("REDIS_SOCKET_TIMEOUT", "redis_socket_timeout", "5s",
             "Longest wait for a Redis reply", duration_parser(positive=True)),
    Variable("REDIS_CONNECT_TIMEOUT", "redis_connect_timeout", "1s",
             "Longest wait to connect to Redis", duration_parser(positive=True)),
    Variable("REDIS_SENTINEL_PASSWORD", "redis_sentinel_password", "",
             "Password of the sentinels a redis+sentinel:// REDIS_URL names (their requirepass), "
             "when they ask for one; the primary's own password goes in the URL", _token, secret=True),
    Variable("PORT_PRODUCER", "port_producer", "8080",
             "Port of the HTTP gateway", _integer(1, 65535)),
    Variable("PORT_WORKER", "port_worker", "8081",
             "Port of workerd's /metrics, /health and /ready", _integer(1, 65535)),
    Variable("TASKFORGE_BIND_HOST", "bind_host", "0.0.0.0",
             "Interface the gateway and workerd's /metrics, /health and /ready listen on; 127.0.0.1 keeps them on this machine",
             _host),
    Variable("WORKER_COUNT", "worker_count", str(WORKER_COUNT_DEFAULT),
             f"Worker processes per workerd host, at most {WORKER_COUNT_MAX}; a bad value falls back to {WORKER_COUNT_DEFAULT} with a warning",
             _worker_count),
    Variable("WORKER_THREADS", "worker_threads", str(WORKER_THREADS_DEFAULT),
             f"Jobs one worker process runs at once, each on its own thread, at most {WORKER_THREADS_MAX} (docs/WORKERD.md, \"Threads\"); 1 runs each job on the process's main thread",
             _integer(1, WORKER_THREADS_MAX)),
    Variable("WORKER_PREFETCH", "worker_prefetch", "on",
             "on: a worker (each job thread) running a short job holds its next job, claimed with the last completion, and starts it while that completion's reply is on its way (docs/WORKERD.md, \"Holding the next job\"); off: it waits for each reply",
             _on_off),
    Variable("WORKER_BATCH", "worker_batch", "1",
             f"Jobs a worker claims in one call and acknowledges in one call, at most {WORKER_BATCH_MAX}; 1 (the default) is off: one call per job (docs/WORKERD.md, \"Batched claims and acknowledgements\"). Above 1 it needs WORKER_THREADS=1, replaces WORKER_PREFETCH, and a worker that dies runs up to N-1 finished jobs again (docs/RELIABILITY.md)",
             _integer(1, WORKER_BATCH_MAX)),
    Variable("TASK_VISIBILITY_TIMEOUT", "visibility_timeout", "30s",
             "Lease length: a job whose lease is not renewed for this long goes back to pending",
             duration_parser(positive=True)),
    Variable("TASK_RETRY_BASE_DELAY", "retry_base_delay", "2s",
             "First retry delay; attempt n waits base × 2^(n−1)", duration_parser(positive=False)),
    Variable("TASK_RETRY_MAX_DELAY", "retry_max_delay", "1h",
             "Cap on the retry delay", duration_parser(positive=False)),
    Variable("TASK_RETRY_JITTER", "retry_jitter", "0",
             "Random spread of a retry delay, as a fraction 0..1 (0.1 = ±10 %)", _fraction),
    Variable("TASK_MAX_RECOVERIES", "max_recoveries", "5",
             "Times a job may lose its worker (crash, lost lease) before it is dead", _integer(1)),
    Variable("TASK_DEFAULT_TIMEOUT", "default_job_timeout", "10m",
             "Run-time limit of a job that sets none; 0 = no limit", duration_parser(positive=False)),
    Variable("TASK_RESULT_MAX_BYTES", "result_max_bytes", "65536",
             "Largest handler result stored, in bytes of JSON", _integer(1)),
    Variable("TASK_FINISHED_RETENTION", "finished_retention", "1d",
             "How long completed and canceled jobs are kept", duration_parser(positive=True)),
    Variable("TASK_FINISHED_MAX_JOBS", "finished_max_jobs", "100000",
             "Completed jobs kept at most over all queues, and canceled ones apart (shared by "
             "the queues holding them); the oldest go first (bounds Redis memory under sustained "
             "load, whatever the retention or the number of queues)", _integer(1)),
    Variable("TASK_DLQ_MAX_JOBS", "dlq_max_jobs", "10000",
             "Dead jobs kept at most over all queues (shared by the queues holding them); the "
             "oldest go first", _integer(1)),
    Variable("TASK_DLQ_MAX_AGE", "dlq_max_age", "7d",
             "How long a dead job is kept", duration_parser(positive=True)),
    Variable("TASK_IDEMPOTENCY_TTL", "idempotency_ttl", "1d",
             "How long an idempotency key maps to its job", duration_parser(positive=True)),
    Variable("WORKER_DRAIN_GRACE", "drain_grace", "25s",
             "On SIGTERM or SIGHUP (reload), how long running jobs may finish before they are released",
             duration_parser(positive=False)),
    Variable("WORKER_CANCEL_GRACE", "cancel_grace", "5s",
             "A running job whose cancel was requested gets SIGTERM, then SIGKILL this much later if it has not stopped",
             duration_parser(positive=False)),
    Variable("WORKER_HEARTBEAT_TIMEOUT", "heartbeat_timeout", "30s",
             "A child process silent this long outside a job is killed and replaced (a job thread silent twice this long beside a beating sibling: its process is drained, then replaced)",
             duration_parser(positive=True)),
    Variable("WORKER_MAX_JOBS", "worker_max_jobs", "0",
             "Jobs a worker process runs before it is replaced; 0 = unlimited", _integer(0)),
    Variable("WORKER_MAX_RSS_MB", "worker_max_rss_mb", "0",
             "Resident memory (MiB) above which a worker process is replaced; 0 = no limit",
             _integer(0)),
    Variable("TASKFORGE_HANDLERS", "handlers", "",
             "Comma-separated handler modules workerd imports at start; required (workerd.demo: the demo handlers)",
             _handlers),
    Variable("WORKER_QUEUES", "worker_queues", DEFAULT_QUEUE,
             "Queues this workerd host serves: in strict order (critical,default,low) or by weight (critical:6,default:3,low:1)",
             parse_worker_queues),
    Variable("TASKFORGE_SCHEDULES", "schedules_file", "",
             "Path of the TOML file of periodic schedules workerd enqueues (docs/SCHEDULES.md); every host should name the same file; unset = none",
             str),
    Variable("TASKFORGE_NAMESPACE", "namespace", "taskforge",
             "Name inside every Redis key's hash tag ({taskforge:<queue>}:v2:…), so several deployments can share one Redis",
             _namespace),
    Variable("TASKFORGE_EVENTS", "events", "on",
             "on: every job transition and worker join, leave, quiet and resume is appended to a capped Redis Stream by the script that makes it (docs/EVENTS.md; GET /events reads them); off: none is written, at no cost (GET /jobs/<id>?wait= then re-reads the job every 0.5 s)",
             _on_off),
    Variable("TASKFORGE_EVENTS_MAX", "events_max", "100000",
             "Events kept per stream, approximately (the oldest go first): on one Redis in the one stream of every queue and host, a bound on the total; on a Cluster in each queue's and the hosts'",
             _integer(1)),
    Variable("TASKFORGE_API_TOKEN", "api_token", "",
             "Bearer token required by every endpoint but /health and /ready; unset = no auth",
             _token, secret=True),
    # --- GET /events and ?wait= (the readers of the event streams) ---
    Variable("TASKFORGE_EVENTS_STREAMS", "events_streams", str(EVENTS_STREAMS_DEFAULT),
             "Open GET /events streams and GET /jobs/<id>?wait= waits each gateway process "
             "serves at once; one more gets 503. Each holds a thread: gunicorn gets this many "
             "threads on top of GUNICORN_THREADS's 32",
             _integer(1, EVENTS_STREAMS_MAX)),
    Variable("TASKFORGE_EVENTS_KEEPALIVE", "events_keepalive", "15s",
             "An idle GET /events stream sends a comment this often (below every proxy's idle "
             "timeout); a client that reads nothing for twice this long is dropped",
             duration_parser(positive=True)),
    # --- durable mode ---
    Variable("TASKFORGE_WAIT_REPLICAS", "wait_replicas", "0",
             f"Durable mode: an enqueue is acknowledged, and a completion or failure counted, only once Redis's WAIT says this many replicas have it (docs/RELIABILITY.md, \"Durable mode\"); 0 = off, at most {WAIT_REPLICAS_MAX}",
             _integer(0, WAIT_REPLICAS_MAX)),
    Variable("TASKFORGE_WAIT_TIMEOUT", "wait_timeout", "500ms",
             f"Durable mode: longest WAIT for the replicas; an enqueue not confirmed by then is a 503 not_replicated. At most REDIS_SOCKET_TIMEOUT minus {WAIT_REPLY_MARGIN:g}s",
             duration_parser(positive=True)),
    Variable("LOG_LEVEL", "log_level", "INFO",
             "DEBUG, INFO, WARNING or ERROR", _choice(LOG_LEVELS, upper=True)),
    # --- abusive clients: who is behind a proxy, how many wrong tokens they may send ---
    Variable("TASKFORGE_TRUSTED_PROXIES", "trusted_proxies", "",
             "Reverse proxies (IP addresses or CIDR networks, comma-separated) whose "
             "X-Forwarded-For header names the client: the right-most address in it that is not "
             "itself one of them. From any other peer the header is ignored. Failed logins and "
             "tokens are counted per client address (docs/API.md, \"Too many failed "
             "authentications\"); unset = the peer's address, always",
             _networks),
    Variable("TASKFORGE_AUTH_MAX_FAILURES", "auth_max_failures", str(AUTH_MAX_FAILURES_DEFAULT),
             "Wrong API tokens (bearer or login form) from one client address within a minute "
             "before that address gets 429 until the minute ends; raise it only for a test "
             "client that sends wrong tokens on purpose (a fuzzer)",
             _integer(1)),
)
# fmt: on


def redact_url(url: str) -> str:
    """Return ``url`` with any password replaced by ``***`` (in userinfo or a query string)."""
    # Plain string surgery: urlunsplit would turn unix:///path into unix:/path.
    match = _URL_PARTS.match(url)
    if match is None:
        return url
    scheme, authority, rest = match.groups()
    userinfo, at, hostport = authority.rpartition("@")
    if at and ":" in userinfo:
        authority = f"{userinfo.partition(':')[0]}:***@{hostport}"
    return scheme + authority + _QUERY_PASSWORD.sub(r"\1***", rest)


def load_or_exit(env: Mapping[str, str] | None = None) -> Settings:
    """Return the settings, or print the one-line reason to stderr and exit 2."""
    try:
        return Settings.from_env(env)
    except ConfigError as exc:
        _exit(f"taskforge: configuration error: {exc}")


def _exit(message: str) -> NoReturn:
    """Print ``message`` to stderr and exit with the usage-error status."""
    print(message, file=sys.stderr)
    sys.exit(2)


def summary(settings: Settings) -> list[str]:
    """Return ``NAME=value`` lines of the effective settings, secrets hidden."""
    lines = []
    for var in VARIABLES:
        value = getattr(settings, var.field)
        if var.secret:
            value = "(set)" if value else "(unset)"
        elif var.env == "REDIS_URL":
            value = redact_url(value)
        elif isinstance(value, bool):
            value = "on" if value else "off"
        elif isinstance(value, QueuePlan):
            value = value.describe()
        elif isinstance(value, tuple):
            value = ",".join(map(str, value)) or "(unset)"
        elif value == "":
            value = "(unset)"  # TASKFORGE_SCHEDULES: no file
        elif isinstance(value, float) and re.fullmatch(r"[0-9.]+(ms|s|m|h|d)", var.default):
            value = f"{value:g}s"  # a duration: say its unit, as the variable is written
        lines.append(f"{var.env}={value}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Print the effective settings, or with --markdown docs/CONFIGURATION.md's tables."""
    parser = argparse.ArgumentParser(
        prog="python -m shared.settings.config", description=main.__doc__
    )
    parser.add_argument(
        "--markdown", action="store_true", help="print the tables of docs/CONFIGURATION.md"
    )
    args = parser.parse_args(argv)
    if args.markdown:
        from shared.settings.config_table import markdown_table  # the table imports this module

        print(markdown_table())
        return 0
    settings = load_or_exit()
    print("\n".join(summary(settings)))
    for warning in settings.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `| head` stopped reading: not our error, and no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
