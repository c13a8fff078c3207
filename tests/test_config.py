"""Settings: defaults, parsing, validation and the table in docs/CONFIGURATION.md."""

from __future__ import annotations

import ast
import dataclasses
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from shared.engine.engine_types import Policy
from shared.settings import config
from shared.settings import config_table as table
from shared.settings.config import VARIABLES, ConfigError, Settings, load_or_exit
from shared.settings.config_table import markdown_table

CONFIG_DOC = Path(__file__).resolve().parent.parent / "docs" / "CONFIGURATION.md"

DEFAULTS = {
    "redis_url": "redis://localhost:6379/0",
    "redis_ssl_cert_reqs": "required",
    "redis_socket_timeout": 5.0,
    "redis_connect_timeout": 1.0,
    "redis_sentinel_password": None,
    "port_producer": 8080,
    "port_worker": 8081,
    "bind_host": "0.0.0.0",
    "worker_count": 3,
    "worker_threads": 1,
    "worker_prefetch": True,
    "worker_batch": 1,
    "visibility_timeout": 30.0,
    "retry_base_delay": 2.0,
    "retry_max_delay": 3600.0,
    "retry_jitter": 0.0,
    "max_recoveries": 5,
    "default_job_timeout": 600.0,
    "result_max_bytes": 65536,
    "finished_retention": 86400.0,
    "dlq_max_jobs": 10000,
    "finished_max_jobs": 100000,
    "dlq_max_age": 7 * 86400.0,
    "idempotency_ttl": 86400.0,
    "drain_grace": 25.0,
    "cancel_grace": 5.0,
    "heartbeat_timeout": 30.0,
    "worker_max_jobs": 0,
    "worker_max_rss_mb": 0,
    "handlers": (),
    "worker_queues": {"names": ("default",), "weights": None},
    "schedules_file": "",
    "namespace": "taskforge",
    "events": True,
    "events_max": 100000,
    "api_token": None,
    "events_streams": 64,
    "events_keepalive": 15.0,
    "wait_replicas": 0,
    "wait_timeout": 0.5,
    "log_level": "INFO",
    "trusted_proxies": (),
    "auth_max_failures": 10,
    "redis_url_defaulted": True,
    "warnings": (),
}


def test_every_setting_has_its_documented_default() -> None:
    assert dataclasses.asdict(Settings.from_env({})) == DEFAULTS


def test_variables_table_and_settings_list_the_same_fields_in_order() -> None:
    names = [f.name for f in dataclasses.fields(Settings)]
    assert [v.field for v in VARIABLES] == names[: len(VARIABLES)]
    assert names[len(VARIABLES) :] == ["redis_url_defaulted", "warnings"]


@pytest.mark.parametrize(("text", "on"), [("on", True), ("OFF", False), ("Off", False)])
def test_events_switch_is_on_or_off(text: str, on: bool) -> None:
    settings = Settings.from_env({"TASKFORGE_EVENTS": text, "TASKFORGE_EVENTS_MAX": "500"})
    assert (settings.events, settings.events_max) == (on, 500)
    assert f"TASKFORGE_EVENTS={'on' if on else 'off'}" in config.summary(settings)


@pytest.mark.parametrize(
    ("name", "text"), [("TASKFORGE_EVENTS", "no"), ("TASKFORGE_EVENTS_MAX", "0")]
)
def test_events_settings_refuse_a_bad_value(name: str, text: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Settings.from_env({name: text})


@pytest.mark.parametrize("text", ["0", "65", "eight", "-1"])
def test_worker_batch_refuses_a_value_outside_1_to_64(text: str) -> None:
    with pytest.raises(ConfigError, match=r"WORKER_BATCH=.*expected an integer 1\.\.64"):
        Settings.from_env({"WORKER_BATCH": text})


def test_worker_batch_reads_1_to_64_and_refuses_job_threads() -> None:
    assert Settings.from_env({"WORKER_BATCH": "64"}).worker_batch == 64
    both = {"WORKER_BATCH": "8", "WORKER_THREADS": "4"}
    with pytest.raises(ConfigError, match=r"WORKER_BATCH=8 is invalid with WORKER_THREADS=4"):
        Settings.from_env(both)
    assert Settings.from_env({**both, "WORKER_BATCH": "1"}).worker_threads == 4


def test_from_env_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORT_PRODUCER", "9090")
    assert Settings.from_env().port_producer == 9090


def test_empty_value_counts_as_unset() -> None:
    settings = Settings.from_env({"REDIS_URL": "  ", "PORT_WORKER": ""})
    assert settings.redis_url_defaulted
    assert settings.port_worker == 8081


def test_redis_url_set_is_not_defaulted() -> None:
    settings = Settings.from_env({"REDIS_URL": "rediss://h.example:6380/1"})
    assert settings.redis_url == "rediss://h.example:6380/1"
    assert not settings.redis_url_defaulted


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("2s", 2.0),
        ("1m", 60.0),
        ("1h", 3600.0),
        ("1d", 86400.0),
        ("45", 45.0),
        ("1.5", 1.5),
        ("0.25s", 0.25),
    ],
)
def test_durations_accept_units_and_bare_seconds(text: str, seconds: float) -> None:
    assert Settings.from_env({"TASK_VISIBILITY_TIMEOUT": text}).visibility_timeout == seconds


@pytest.mark.parametrize("text", ["-1", "-5s", "abc", "5x", "5 s", "s", "1e3", "inf", "nan", "2S"])
def test_durations_reject_negatives_and_garbage(text: str) -> None:
    with pytest.raises(ConfigError, match=r"TASK_RETRY_BASE_DELAY=.*expected a duration"):
        Settings.from_env({"TASK_RETRY_BASE_DELAY": text})


def test_lease_length_must_be_positive_but_job_timeout_may_be_zero() -> None:
    with pytest.raises(ConfigError, match=r"TASK_VISIBILITY_TIMEOUT='0'.*greater than 0"):
        Settings.from_env({"TASK_VISIBILITY_TIMEOUT": "0"})
    assert Settings.from_env({"TASK_DEFAULT_TIMEOUT": "0"}).default_job_timeout == 0.0


@pytest.mark.parametrize(("text", "count"), [("1", 1), ("8", 8), ("512", 512)])
def test_worker_count_accepts_1_to_512(text: str, count: int) -> None:
    settings = Settings.from_env({"WORKER_COUNT": text})
    assert (settings.worker_count, settings.warnings) == (count, ())


@pytest.mark.parametrize("text", ["0", "-2", "three", "2.5"])
def test_invalid_worker_count_falls_back_to_3_with_a_warning(text: str) -> None:
    settings = Settings.from_env({"WORKER_COUNT": text})
    assert settings.worker_count == 3
    assert settings.warnings == (f"WORKER_COUNT={text!r} is not an integer ≥ 1; using 3",)


def test_worker_count_above_the_cap_is_capped_with_a_warning() -> None:
    settings = Settings.from_env({"WORKER_COUNT": "10000"})
    assert settings.worker_count == 512
    assert settings.warnings == ("WORKER_COUNT='10000' is above the cap of 512; using it",)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("REDIS_URL", "http://localhost:6379", "redis://, rediss:// or unix://"),
        ("REDIS_URL", "redis://localhost:notaport/0", "redis://, rediss:// or unix://"),
        ("REDIS_URL", "unix://", "socket path"),
        ("REDIS_SSL_CERT_REQS", "maybe", "one of required, optional, none"),
        ("REDIS_SOCKET_TIMEOUT", "0", "greater than 0"),
        ("PORT_PRODUCER", "0", "an integer 1..65535"),
        ("PORT_WORKER", "70000", "an integer 1..65535"),
        ("PORT_WORKER", "80a", "an integer 1..65535"),
        ("WORKER_THREADS", "0", "an integer 1..64"),
        ("WORKER_THREADS", "65", "an integer 1..64"),
        ("WORKER_THREADS", "two", "an integer 1..64"),
        ("TASK_RETRY_JITTER", "1.5", "a number from 0 to 1"),
        ("TASK_RETRY_JITTER", "nan", "a number from 0 to 1"),
        ("TASK_MAX_RECOVERIES", "0", "an integer ≥ 1"),
        ("TASK_RESULT_MAX_BYTES", "lots", "an integer ≥ 1"),
        ("TASK_FINISHED_RETENTION", "0", "greater than 0"),
        ("TASK_DLQ_MAX_JOBS", "0", "an integer ≥ 1"),
        ("TASK_DLQ_MAX_AGE", "forever", "a duration"),
        ("TASK_IDEMPOTENCY_TTL", "-1d", "a duration"),
        ("WORKER_DRAIN_GRACE", "soon", "a duration"),
        ("WORKER_CANCEL_GRACE", "later", "a duration"),
        ("WORKER_MAX_JOBS", "-1", "an integer ≥ 0"),
        ("WORKER_MAX_RSS_MB", "1.5", "an integer ≥ 0"),
        ("TASKFORGE_HANDLERS", "my-app.tasks", "module names"),
        ("LOG_LEVEL", "TRACE", "one of DEBUG, INFO, WARNING, ERROR"),
    ],
)
def test_invalid_value_raises_config_error_naming_variable_value_and_expectation(
    name: str, value: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({name: value})
    message = str(info.value)
    assert message.startswith(f"{name}={value!r} is invalid: expected ")
    assert expected in message


@pytest.mark.parametrize(
    "url", ["redis://localhost:6379/0", "rediss://:pw@host:6380", "unix:///run/redis.sock?db=2"]
)
def test_redis_url_accepts_the_three_schemes(url: str) -> None:
    assert Settings.from_env({"REDIS_URL": url}).redis_url == url


def test_bad_redis_url_error_does_not_show_its_password() -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"REDIS_URL": "http://user:hunter2@host/0"})
    assert "hunter2" not in str(info.value)
    assert "REDIS_URL='http://user:***@host/0'" in str(info.value)


def test_case_insensitive_choices_are_normalized() -> None:
    settings = Settings.from_env({"LOG_LEVEL": "debug", "REDIS_SSL_CERT_REQS": "NONE"})
    assert (settings.log_level, settings.redis_ssl_cert_reqs) == ("DEBUG", "none")


def test_handlers_are_a_tuple_of_module_names() -> None:
    settings = Settings.from_env({"TASKFORGE_HANDLERS": " myapp.tasks, workerd.demo ,, "})
    assert settings.handlers == ("myapp.tasks", "workerd.demo")


@pytest.mark.parametrize("name", ["taskforge", "tf", "app.prod-2"])
def test_a_namespace_of_name_characters_is_accepted(name: str) -> None:
    assert Settings.from_env({"TASKFORGE_NAMESPACE": name}).namespace == name


@pytest.mark.parametrize("name", ["{taskforge}", "a:b", "task forge", "x" * 65])
def test_a_namespace_that_would_break_the_hash_tag_is_refused(name: str) -> None:
    # It sits inside every key's {hash tag}: braces or ':' would move or split the tag.
    with pytest.raises(ConfigError, match=r"TASKFORGE_NAMESPACE=.*1-64 characters"):
        Settings.from_env({"TASKFORGE_NAMESPACE": name})


@pytest.mark.parametrize(
    ("text", "names", "weights"),
    [
        ("default", ("default",), None),
        ("critical, default ,low", ("critical", "default", "low"), None),
        ("critical:6,default:3,low:1", ("critical", "default", "low"), (6, 3, 1)),
    ],
)
def test_worker_queues_are_strict_or_weighted(
    text: str, names: tuple[str, ...], weights: tuple[int, ...] | None
) -> None:
    plan = Settings.from_env({"WORKER_QUEUES": text}).worker_queues
    assert (plan.names, plan.weights) == (names, weights)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("a,,", None),
        ("a:6,b", "every queue with a weight"),
        ("a,a", "listed twice"),
        ("a:0", "whole number 1-1000"),
        ("a:x", "whole number 1-1000"),
        ("a b", "1-64 characters"),
        (",", "at least one queue"),
    ],
)
def test_bad_worker_queues_are_refused_naming_the_problem(text: str, reason: str | None) -> None:
    if reason is None:  # empty items are dropped, as in TASKFORGE_HANDLERS
        assert Settings.from_env({"WORKER_QUEUES": text}).worker_queues.names == ("a",)
        return
    with pytest.raises(ConfigError, match=f"WORKER_QUEUES=.*{reason}"):
        Settings.from_env({"WORKER_QUEUES": text})


def test_api_token_never_appears_in_repr() -> None:
    settings = Settings.from_env({"TASKFORGE_API_TOKEN": "s3cret-token"})
    assert settings.api_token == "s3cret-token"
    assert "s3cret-token" not in repr(settings)
    assert "s3cret-token" not in "\n".join(config.summary(settings))


def test_settings_are_frozen_and_replace_makes_variants() -> None:
    settings = Settings.from_env({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.worker_count = 5  # type: ignore[misc]
    assert dataclasses.replace(settings, worker_count=5).worker_count == 5


def test_load_or_exit_prints_one_line_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        load_or_exit({"PORT_PRODUCER": "http"})
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        "taskforge: configuration error: PORT_PRODUCER='http' is invalid: "
        "expected an integer 1..65535\n"
    )


def test_load_or_exit_returns_settings_when_valid() -> None:
    assert load_or_exit({"WORKER_COUNT": "7"}).worker_count == 7


def test_markdown_table_lists_every_variable_with_its_default() -> None:
    rows = [line for line in markdown_table().splitlines() if line.startswith("| `")]
    assert len(rows) == len(table.table_rows())
    shown = {row.split(" | ")[0].removeprefix("| `").removesuffix("`"): row for row in rows}
    for var in VARIABLES:
        default = f"`{var.default}`" if var.default else "(unset)"
        assert shown[var.env].split(" | ")[1] == default


def test_markdown_table_has_a_heading_and_a_header_row_per_section() -> None:
    lines = markdown_table().splitlines()
    for section in table.SECTIONS:
        at = lines.index(f"### {section.title}")
        assert lines[at + 2] == "| Variable | Default | Meaning | Read by |"


def test_table_lists_each_settings_variable_once_and_externals_outside_settings() -> None:
    settings_rows = [r.env for s in table.SECTIONS for r in s.rows if isinstance(r, table.Setting)]
    externals = [r.env for s in table.SECTIONS for r in s.rows if isinstance(r, table.External)]
    assert sorted(settings_rows) == sorted(var.env for var in VARIABLES)
    assert len(set(externals)) == len(externals)
    assert not set(externals) & set(settings_rows)
    assert not set(table.NOT_OURS) & (set(externals) | set(settings_rows))


def test_configuration_doc_holds_the_generated_table() -> None:
    # Regenerate with: python -m shared.settings.config --markdown
    assert markdown_table() in CONFIG_DOC.read_text()


def test_cli_prints_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    assert config.main(["--markdown"]) == 0
    assert capsys.readouterr().out == markdown_table() + "\n"


def test_cli_prints_effective_settings_without_secrets(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://:pw123@localhost:6379/0")
    monkeypatch.setenv("TASKFORGE_API_TOKEN", "tok456")
    monkeypatch.setenv("WORKER_COUNT", "x")
    assert config.main([]) == 0
    out, err = capsys.readouterr()
    assert "REDIS_URL=redis://:***@localhost:6379/0" in out.splitlines()
    assert "TASKFORGE_API_TOKEN=(set)" in out.splitlines()
    assert "pw123" not in out and "tok456" not in out
    assert "warning: WORKER_COUNT='x'" in err


# --- every environment variable read is in the table, and nothing else is -------------------
# The readers are the programs' own source: gateway/, workerd/, shared/ (Python), deploy/*.py
# (gunicorn's config file) and bin/* (bash). systemd units, the compose file and the env
# example are deployment: they set variables, they do not read them.

ROOT = Path(__file__).resolve().parent.parent
SHELL_READ = re.compile(r"\$\{?([A-Z_][A-Z0-9_]*)")
# A name bash itself declares local or read-only is the script's own, not the environment's.
SHELL_OWN = re.compile(r"^\s*(?:readonly|local|declare(?:\s+-\w+)?)\s+([A-Z_][A-Z0-9_]*)=", re.M)
# A comment starts at a '#' that begins a word ("${#array[@]}" and "$#" are not comments).
SHELL_COMMENT = re.compile(r"(?:^|(?<=\s))#.*$", re.M)
# The one read the scanner cannot name by itself: Settings.from_env's loop over VARIABLES.
SETTINGS_LOOP = ("shared/settings/config.py", "var.env")


@dataclass(frozen=True)
class Read:
    """One environment read: the variable (or the unresolved expression), file and line."""

    name: str
    path: str
    line: int
    resolved: bool = True


def is_reader_source(path: str) -> bool:
    """Tell whether ``path`` (relative, posix) is a program that may read the environment."""
    top, _, rest = path.partition("/")
    if top in ("gateway", "workerd", "shared"):
        return path.endswith(".py")
    if top == "deploy":
        return path.endswith(".py") and "/" not in rest
    return top == "bin" and "/" not in rest


def reader_sources() -> list[str]:
    """Return the tracked reader sources (every file on disk when this is no git checkout)."""
    try:
        listing = subprocess.run(
            ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=30
        ).stdout.decode()
        paths = [path for path in listing.split("\0") if path]
    except (OSError, subprocess.CalledProcessError):
        paths = [path.relative_to(ROOT).as_posix() for path in ROOT.rglob("*") if path.is_file()]
    return sorted(path for path in paths if is_reader_source(path))


def programs_of(path: str) -> set[str]:
    """Return the programs that run ``path``: shared/ runs in the gateway and in workerd."""
    top = path.partition("/")[0]
    if top == "shared":
        return {table.GATEWAY, table.WORKERD}
    if top in ("gateway", "workerd"):
        return {top}
    if path == "bin/_common.sh":
        return {table.BIN_RUN, table.BIN_TEST}
    return {path}


def module_strings(tree: ast.Module) -> dict[str, str]:
    """Return the module-level ``NAME = "text"`` constants of ``tree``."""
    found = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            found.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return found


class PythonReads:
    """Find the environment reads of one Python module and name their variables."""

    def __init__(self, source: str, path: str, imported: dict[str, dict[str, str]]) -> None:
        self.path = path
        self.tree = ast.parse(source)
        self.strings = module_strings(self.tree)
        for node in self.tree.body:  # constants imported from other scanned modules
            if isinstance(node, ast.ImportFrom) and node.module in imported:
                for alias in node.names:
                    if alias.name in imported[node.module]:
                        self.strings[alias.asname or alias.name] = imported[node.module][alias.name]
        self.parent = {c: p for p in ast.walk(self.tree) for c in ast.iter_child_nodes(p)}
        # "from os import environ, getenv": what those names are called here
        self.from_os = {
            alias.asname or alias.name: alias.name
            for node in ast.walk(self.tree)
            if isinstance(node, ast.ImportFrom) and node.module == "os"
            for alias in node.names
        }

    def reads(self) -> list[Read]:
        """Return every read of os.environ / os.getenv / a mapping called ``env``."""
        found = []
        for node in ast.walk(self.tree):
            key = self._key(node)
            if key is None:
                continue
            names = self._names(key, node)
            if names is None:
                found.append(Read(ast.unparse(key), self.path, node.lineno, resolved=False))
            else:
                found += [Read(name, self.path, node.lineno) for name in sorted(names)]
        return found

    def _is_os(self, node: ast.AST, name: str) -> bool:
        """Tell whether ``node`` is ``os.<name>`` or ``<name>`` imported from os."""
        if isinstance(node, ast.Attribute) and node.attr == name:
            return isinstance(node.value, ast.Name) and node.value.id == "os"
        return isinstance(node, ast.Name) and self.from_os.get(node.id) == name

    def _is_environ(self, node: ast.AST) -> bool:
        """Tell whether ``node`` is the process environment, or a mapping called ``env``."""
        return self._is_os(node, "environ") or (isinstance(node, ast.Name) and node.id == "env")

    def _key(self, node: ast.AST) -> ast.expr | None:
        """Return the key expression if ``node`` reads the environment."""
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "get":
                return node.args[0] if self._is_environ(func.value) else None
            return node.args[0] if self._is_os(func, "getenv") else None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            return node.slice if self._is_environ(node.value) else None
        if (
            isinstance(node, ast.Compare)
            and isinstance(node.ops[0], ast.In | ast.NotIn)
            and self._is_environ(node.comparators[0])
        ):
            return node.left
        return None

    def _names(self, key: ast.expr, at: ast.AST) -> set[str] | None:
        """Name the variables ``key`` can hold at ``at``, or None when it cannot be told."""
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return {key.value}
        if not isinstance(key, ast.Name):
            return None
        scope: ast.AST | None = at
        while scope is not None:  # innermost binding first: a loop over literals, a parameter
            target = scope.target if isinstance(scope, ast.For) else None
            if isinstance(target, ast.Name) and target.id == key.id:
                return self._literals(scope.iter)  # type: ignore[attr-defined]
            if isinstance(scope, ast.FunctionDef) and key.id in [a.arg for a in scope.args.args]:
                return self._call_site_names(scope, key.id)
            scope = self.parent.get(scope)
        return {self.strings[key.id]} if key.id in self.strings else None

    def _literals(self, node: ast.expr) -> set[str] | None:
        """Return the strings of a literal tuple or list of strings (or module constants)."""
        if not isinstance(node, ast.Tuple | ast.List):
            return None
        names = [self._names(element, node) for element in node.elts]
        return None if any(n is None for n in names) else set().union(*names)  # type: ignore[arg-type]

    def _call_site_names(self, func: ast.FunctionDef, param: str) -> set[str] | None:
        """Resolve a parameter through every call of ``func`` in this module."""
        index = [a.arg for a in func.args.args].index(param)
        calls = [
            n
            for n in ast.walk(self.tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == func.name
        ]
        names: set[str] = set()
        for call in calls:
            given = {kw.arg: kw.value for kw in call.keywords}.get(param)
            arg = call.args[index] if index < len(call.args) else given
            found = self._names(arg, call) if arg is not None else None
            if found is None:
                return None
            names |= found
        return names or None


def shell_reads(source: str, path: str) -> list[Read]:
    """Return the ``$X`` / ``${X`` reads of upper-case names a bash script does not own."""
    own = set(SHELL_OWN.findall(source))
    found = []
    for number, line in enumerate(source.splitlines(), start=1):
        code = SHELL_COMMENT.sub("", line)
        found += [Read(n, path, number) for n in SHELL_READ.findall(code) if n not in own]
    return found


def environment_reads(paths: list[str]) -> list[Read]:
    """Return every environment read in ``paths`` (relative to the repository root)."""
    sources = {path: (ROOT / path).read_text() for path in paths}
    python = [path for path in paths if path.endswith(".py")]
    imported = {
        path.removesuffix(".py").replace("/", "."): module_strings(ast.parse(sources[path]))
        for path in python
    }
    reads = []
    for path in paths:
        first_line = sources[path].partition("\n")[0]
        if path in python:
            reads += PythonReads(sources[path], path, imported).reads()
        elif path.endswith(".sh") or (first_line.startswith("#!") and "bash" in first_line):
            reads += shell_reads(sources[path], path)
        else:  # a new kind of program needs its own scanner, not silence
            raise AssertionError(f"{path}: neither Python nor bash; teach this scan to read it")
    return reads


@pytest.fixture(scope="module")
def reads() -> list[Read]:
    found = environment_reads(reader_sources())
    assert found, "the scan found no environment read at all: is it looking in the right place?"
    return found


def table_readers() -> dict[str, tuple[str, ...]]:
    return {row.env: row.read_by for section in table.SECTIONS for row in section.rows}


def test_every_environment_read_names_its_variable(reads: list[Read]) -> None:
    unresolved = [
        f"{r.path}:{r.line}: {r.name}"
        for r in reads
        if not r.resolved and (r.path, r.name) != SETTINGS_LOOP
    ]
    assert not unresolved, (
        "cannot tell which variable these read; use a literal, a module constant, a loop over "
        f"literals or a parameter given literals: {unresolved}"
    )
    assert any((r.path, r.name) == SETTINGS_LOOP for r in reads), "Settings.from_env moved?"


def test_every_variable_read_is_in_the_configuration_table(reads: list[Read]) -> None:
    documented = set(table_readers()) | set(table.NOT_OURS)
    missing = sorted(
        {f"{r.name} ({r.path}:{r.line})" for r in reads if r.resolved and r.name not in documented}
    )
    assert not missing, (
        f"read but not in shared/settings/config_table.py's SECTIONS (or NOT_OURS): {missing}"
    )


def test_every_table_entry_is_read_somewhere(reads: list[Read]) -> None:
    read = {r.name for r in reads if r.resolved}
    if any((r.path, r.name) == SETTINGS_LOOP for r in reads):
        read |= {var.env for var in VARIABLES}
    stale = sorted((set(table_readers()) | set(table.NOT_OURS)) - read)
    assert not stale, f"in the configuration table but read by nothing: {stale}"


def test_table_names_a_program_that_runs_each_read(reads: list[Read]) -> None:
    readers = table_readers()
    wrong = [
        f"{r.name}: {r.path}:{r.line} runs in {sorted(programs_of(r.path))}, "
        f"the table says {list(readers[r.name])}"
        for r in reads
        if r.resolved and r.name in readers and not programs_of(r.path) & set(readers[r.name])
    ]
    assert not wrong, wrong


def test_scanner_finds_each_form_of_python_read() -> None:
    source = """
import os
from os import environ as process_env, getenv
from shared.somewhere import IMPORTED
CONSTANT = "E_CONST"

def count(name, default):
    return os.environ.get(name, default)

a = os.environ.get("A_GET")
b = os.environ["B_ITEM"]
c = os.getenv("C_GETENV")
d = lambda env: env.get("D_ENV")
e = os.environ.get(CONSTANT)
f = [os.environ.get(n) for n in ()]
for name in ("F_LOOP", "G_LOOP"):
    os.environ.get(name)
count("H_PARAM", 1)
i = "I_IN" in os.environ
j = os.environ.get(IMPORTED)
os.environ["NOT_A_READ"] = "x"
l = process_env.get("L_FROM_OS") or getenv("M_GETENV")
request_environ = {}
request_environ.get("PATH_INFO")
k = os.environ.get(unknown)
"""
    imported = {"shared.somewhere": {"IMPORTED": "J_IMPORTED"}}
    found = PythonReads(source, "x.py", imported).reads()
    names = {r.name for r in found if r.resolved}
    assert names == {
        "A_GET", "B_ITEM", "C_GETENV", "D_ENV", "E_CONST", "F_LOOP", "G_LOOP", "H_PARAM",
        "I_IN", "J_IMPORTED", "L_FROM_OS", "M_GETENV",
    }  # fmt: skip
    assert sorted(r.name for r in found if not r.resolved) == ["n", "unknown"]


def test_scanner_finds_shell_reads_but_not_comments_or_script_constants() -> None:
    source = """#!/usr/bin/env bash
# REDIS_URL in a comment, even as $COMMENTED, is no read
readonly STOP_TIMEOUT=30
port=${REDIS_PORT:-6399} count=${#names[@]}
echo "$HOST:$port $# $1" # trailing $ALSO_COMMENTED
sleep "$STOP_TIMEOUT"
"""
    assert [(r.name, r.line) for r in shell_reads(source, "bin/x")] == [
        ("REDIS_PORT", 4),
        ("HOST", 5),
    ]


def test_is_reader_source_takes_programs_not_deployment_files() -> None:
    takes = ["gateway/app.py", "shared/obs/tracing.py", "deploy/gunicorn.conf.py", "bin/run"]
    leaves = [
        "deploy/compose.yaml",
        "deploy/systemd/taskforge.env.example",
        "tests/support/tools.py",
    ]
    assert [is_reader_source(p) for p in takes + leaves] == [True] * 4 + [False] * 3


def test_markdown_piped_into_head_ends_quietly() -> None:
    # `python -m shared.settings.config --markdown | head` closes the pipe early: no traceback.
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "shared.settings.config", "--markdown"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).resolve().parent.parent,
        bufsize=0,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the child (still starting) writes: its write meets EPIPE
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=30) in (0, 1)
    assert "Traceback" not in stderr, stderr


def test_durable_mode_is_off_by_default_and_reads_its_two_settings() -> None:
    settings = Settings.from_env({"TASKFORGE_WAIT_REPLICAS": "2", "TASKFORGE_WAIT_TIMEOUT": "1s"})
    assert (settings.wait_replicas, settings.wait_timeout) == (2, 1.0)
    assert (
        Policy.from_settings(settings).wait_replicas,
        Policy.from_settings(settings).wait_timeout_ms,
    ) == (2, 1000)
    assert Policy.from_settings(Settings.from_env({})).wait_replicas == 0


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"TASKFORGE_WAIT_REPLICAS": "-1"}, "TASKFORGE_WAIT_REPLICAS"),
        ({"TASKFORGE_WAIT_REPLICAS": "17"}, "TASKFORGE_WAIT_REPLICAS"),
        ({"TASKFORGE_WAIT_REPLICAS": "one"}, "TASKFORGE_WAIT_REPLICAS"),
        ({"TASKFORGE_WAIT_TIMEOUT": "0"}, "TASKFORGE_WAIT_TIMEOUT"),
        # A WAIT the socket would cut short reads as an outage: refused at start.
        ({"TASKFORGE_WAIT_REPLICAS": "1", "TASKFORGE_WAIT_TIMEOUT": "5s"}, "REDIS_SOCKET_TIMEOUT"),
        (
            {
                "TASKFORGE_WAIT_REPLICAS": "1",
                "TASKFORGE_WAIT_TIMEOUT": "2s",
                "REDIS_SOCKET_TIMEOUT": "2s",
            },
            "TASKFORGE_WAIT_TIMEOUT",
        ),
    ],
)
def test_durable_mode_refuses_a_bad_value(env: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        Settings.from_env(env)


def test_a_long_wait_timeout_is_fine_while_durable_mode_is_off() -> None:
    assert Settings.from_env({"TASKFORGE_WAIT_TIMEOUT": "10s"}).wait_timeout == 10.0
