"""Settings: defaults, parsing, validation and the README table."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from shared import config
from shared.config import VARIABLES, ConfigError, Settings, load_or_exit, markdown_table

README = Path(__file__).resolve().parent.parent / "README.md"

DEFAULTS = {
    "redis_url": "redis://localhost:6379/0",
    "redis_ssl_cert_reqs": "required",
    "redis_socket_timeout": 5.0,
    "redis_connect_timeout": 1.0,
    "port_producer": 8080,
    "port_worker": 8081,
    "bind_host": "0.0.0.0",
    "worker_count": 3,
    "visibility_timeout": 30.0,
    "retry_base_delay": 2.0,
    "retry_max_delay": 3600.0,
    "retry_jitter": 0.0,
    "max_recoveries": 5,
    "default_job_timeout": 600.0,
    "result_max_bytes": 65536,
    "finished_retention": 86400.0,
    "dlq_max_jobs": 10000,
    "dlq_max_age": 7 * 86400.0,
    "idempotency_ttl": 86400.0,
    "drain_grace": 25.0,
    "heartbeat_timeout": 30.0,
    "worker_max_jobs": 0,
    "worker_max_rss_mb": 0,
    "handlers": (),
    "key_prefix": "{taskforge}:v1:",
    "api_token": None,
    "log_level": "INFO",
    "redis_url_defaulted": True,
    "warnings": (),
}


def test_every_setting_has_its_documented_default() -> None:
    assert dataclasses.asdict(Settings.from_env({})) == DEFAULTS


def test_variables_table_and_settings_list_the_same_fields_in_order() -> None:
    names = [f.name for f in dataclasses.fields(Settings)]
    assert [v.field for v in VARIABLES] == names[: len(VARIABLES)]
    assert names[len(VARIABLES) :] == ["redis_url_defaulted", "warnings"]


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
        ("TASK_RETRY_JITTER", "1.5", "a number from 0 to 1"),
        ("TASK_RETRY_JITTER", "nan", "a number from 0 to 1"),
        ("TASK_MAX_RECOVERIES", "0", "an integer ≥ 1"),
        ("TASK_RESULT_MAX_BYTES", "lots", "an integer ≥ 1"),
        ("TASK_FINISHED_RETENTION", "0", "greater than 0"),
        ("TASK_DLQ_MAX_JOBS", "0", "an integer ≥ 1"),
        ("TASK_DLQ_MAX_AGE", "forever", "a duration"),
        ("TASK_IDEMPOTENCY_TTL", "-1d", "a duration"),
        ("WORKER_DRAIN_GRACE", "soon", "a duration"),
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


@pytest.mark.parametrize("prefix", ["{taskforge}:v1:", "{tf}:", "app:{q}:v2:"])
def test_key_prefix_with_hash_tag_and_trailing_colon_is_accepted(prefix: str) -> None:
    assert Settings.from_env({"TASKFORGE_KEY_PREFIX": prefix}).key_prefix == prefix


@pytest.mark.parametrize(
    "prefix",
    [
        "taskforge:v1:",  # no hash tag
        "{}:v1:",  # empty hash tag: Redis would hash the whole key
        "{}{x}:",  # Redis uses the first {...}, which is empty
        "{taskforge}:v1",  # no trailing colon
        "{task forge}:",  # whitespace
        "{taskforge:",  # unclosed
    ],
)
def test_key_prefix_without_usable_hash_tag_or_colon_is_refused(prefix: str) -> None:
    with pytest.raises(ConfigError, match=r"TASKFORGE_KEY_PREFIX=.*hash tag"):
        Settings.from_env({"TASKFORGE_KEY_PREFIX": prefix})


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
    table = markdown_table().splitlines()
    assert table[0] == "| Variable | Default | Meaning |"
    rows = table[2:]
    assert len(rows) == len(VARIABLES)
    for row, var in zip(rows, VARIABLES, strict=True):
        assert row.startswith(f"| `{var.env}` | ")
        assert (f"`{var.default}`" if var.default else "(unset)") in row


def test_readme_holds_the_generated_table() -> None:
    # Regenerate with: python -m shared.config --markdown
    assert markdown_table() in README.read_text()


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
