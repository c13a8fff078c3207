"""deploy/compose.yaml and deploy/Dockerfile: Docker cannot run here, so read them closely.

The compose file must parse, build the Dockerfile, run the Procfile's commands, and hold the
health checks, volume, ordering, stop grace and profile the issue asks for; every environment
value (defaults substituted) must be one the services accept.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from shared.settings.config import VARIABLES, Settings
from tests.deploy.conftest import DEPLOY, ROOT, procfile

COMPOSE = DEPLOY / "compose.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
DEFAULT_GRACE = next(v for v in VARIABLES if v.env == "WORKER_DRAIN_GRACE")
TRACING_ENV = {"OTEL_TRACING_ENABLED", "OTEL_EXPORTER_OTLP_ENDPOINT"}  # shared/obs/tracing.py
GUNICORN_GRACEFUL_TIMEOUT = 25.0  # deploy/gunicorn.conf.py; checked in test_systemd.py
# ${NAME:-default}, ${NAME-default} or ${NAME}: compose's interpolation.
INTERPOLATION = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)s", value)
    assert match, f"use plain seconds such as 40s, not {value!r}"
    return float(match[1])


def _environment(service: dict[str, Any]) -> dict[str, str]:
    """Return a service's environment with compose's defaults substituted."""
    return {
        name: INTERPOLATION.sub(lambda m: m[2] or "", str(value))
        for name, value in service["environment"].items()
    }


def _dockerfile() -> list[tuple[str, str]]:
    """Return the Dockerfile's instructions as (KEYWORD, arguments), continuations joined."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line and not line.startswith("#")
    ]


def test_compose_runs_redis_7_with_append_only_data_in_the_named_volume(
    compose: dict[str, Any],
) -> None:
    redis = compose["services"]["redis"]
    assert redis["image"].split(":")[1].split(".")[0] == "7"
    assert "redis-data:/data" in redis["volumes"]
    assert "redis-data" in compose["volumes"]
    # deploy/redis.conf (appendonly yes, noeviction; tested on a real server) is the config.
    mounts = [v.split(":") for v in redis["volumes"]]
    conf = next(target for source, target, *_ in mounts if source == "./redis.conf")
    assert (DEPLOY / "redis.conf").is_file()
    assert redis["command"] == ["redis-server", conf]
    assert redis["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]


@pytest.mark.parametrize(("service", "process"), [("gateway", "web"), ("workerd", "worker")])
def test_services_build_the_dockerfile_and_run_the_procfile_command(
    compose: dict[str, Any], service: str, process: str
) -> None:
    spec = compose["services"][service]
    build = spec["build"]
    assert (COMPOSE.parent / build["context"]).resolve() == ROOT
    assert ROOT / build["dockerfile"] == DOCKERFILE
    assert spec["command"] == shlex.split(procfile()[process])
    assert spec["depends_on"] == {"redis": {"condition": "service_healthy"}}
    assert spec["init"] is True  # tini passes SIGTERM on and reaps


@pytest.mark.parametrize(("service", "port"), [("gateway", 8080), ("workerd", 8081)])
def test_services_publish_their_port_and_check_ready_on_it(
    compose: dict[str, Any], service: str, port: int
) -> None:
    spec = compose["services"][service]
    # Published on the host's loopback only: the gateway has no token by default, and
    # workerd's endpoints never have one.
    assert spec["ports"] == [f"127.0.0.1:{port}:{port}"]
    test = spec["healthcheck"]["test"]
    assert test[0] == "CMD"
    assert f"http://127.0.0.1:{port}/ready" in " ".join(test)
    env = _environment(spec)
    listens = env.get("PORT") or env.get("PORT_WORKER")
    assert listens == str(port)


def test_workerd_runs_the_demo_handlers_by_default_the_only_ones_in_the_image(
    compose: dict[str, Any],
) -> None:
    # workerd refuses to start without TASKFORGE_HANDLERS: compose must set it.
    env = compose["services"]["workerd"]["environment"]
    assert env["TASKFORGE_HANDLERS"] == "${TASKFORGE_HANDLERS:-workerd.demo}"
    copied = {
        source for keyword, args in _dockerfile() if keyword == "COPY" for source in args.split()
    }
    assert "workerd" in copied and (ROOT / "workerd" / "demo.py").is_file()


@pytest.mark.parametrize("service", ["gateway", "workerd"])
def test_services_listen_on_every_interface_of_the_container(
    compose: dict[str, Any], service: str
) -> None:
    # Docker's port mapping forwards to the container's own address, never to its loopback.
    assert _environment(compose["services"][service])["TASKFORGE_BIND_HOST"] == "0.0.0.0"


def test_workerd_runs_four_workers_by_default_overridable_from_the_shell(
    compose: dict[str, Any],
) -> None:
    assert compose["services"]["workerd"]["environment"]["WORKER_COUNT"] == "${WORKER_COUNT:-4}"


def test_stop_grace_periods_outlast_the_drain_and_gunicorns_graceful_timeout(
    compose: dict[str, Any],
) -> None:
    workerd = compose["services"]["workerd"]
    grace = DEFAULT_GRACE.parse(_environment(workerd)["WORKER_DRAIN_GRACE"])
    assert _seconds(workerd["stop_grace_period"]) >= grace + 10 + 5
    gateway = compose["services"]["gateway"]
    assert _seconds(gateway["stop_grace_period"]) > GUNICORN_GRACEFUL_TIMEOUT + 5


@pytest.mark.parametrize("service", ["gateway", "workerd"])
def test_service_environment_is_valid_configuration(compose: dict[str, Any], service: str) -> None:
    env = _environment(compose["services"][service])
    known = {v.env for v in VARIABLES} | {"PORT", "WEB_CONCURRENCY"} | TRACING_ENV
    assert set(env) <= known, set(env) - known
    settings = Settings.from_env(env)  # raises on any value the services would refuse
    assert settings.redis_url == "redis://redis:6379/0"


def test_every_published_port_is_on_loopback_only(compose: dict[str, Any]) -> None:
    # docs/DEPLOYMENT.md promises 127.0.0.1 only: none of these ports has authentication
    # by default (the gateway's token is opt-in; workerd's endpoints and Jaeger have none).
    published = {
        (name, port) for name, spec in compose["services"].items() for port in spec.get("ports", [])
    }
    assert published
    assert {(name, port) for name, port in published if not port.startswith("127.0.0.1:")} == set()


def test_tracing_profile_adds_only_a_jaeger_all_in_one_collector(
    compose: dict[str, Any],
) -> None:
    profiled = {
        name: spec["profiles"] for name, spec in compose["services"].items() if "profiles" in spec
    }
    assert profiled == {"jaeger": ["tracing"]}
    jaeger = compose["services"]["jaeger"]
    assert jaeger["image"].startswith("jaegertracing/all-in-one:")
    assert jaeger["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
    # UI, OTLP over gRPC (where the services send) and OTLP over HTTP, on loopback only.
    assert jaeger["ports"] == [f"127.0.0.1:{port}:{port}" for port in (16686, 4317, 4318)]
    for name in ("gateway", "workerd"):
        spec = compose["services"][name]
        env = spec["environment"]
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4317"
        # One switch: off by default, and the same value decides the image's packages.
        assert env["OTEL_TRACING_ENABLED"] == "${OTEL_TRACING_ENABLED:-false}"
        assert spec["build"]["args"] == {"TRACING": "${OTEL_TRACING_ENABLED:-false}"}


def test_dockerfile_installs_the_tracing_requirements_only_when_asked() -> None:
    instructions = _dockerfile()
    assert ("ARG", "TRACING=false") in instructions
    assert ("COPY", "requirements-tracing.txt ./") in instructions
    [install] = [a for k, a in instructions if k == "RUN" and "TRACING" in a]
    assert install == (
        'if [ "$TRACING" = true ]; then .venv/bin/pip install -r requirements-tracing.txt; fi'
    )
    listed = (ROOT / "requirements-tracing.txt").read_text().split()
    assert any(line.startswith("opentelemetry-sdk") for line in listed)


def test_dockerfile_image_runs_as_an_unprivileged_user_with_the_procfile_web_command() -> None:
    instructions = _dockerfile()
    last_from = max(i for i, (keyword, _) in enumerate(instructions) if keyword == "FROM")
    final = instructions[last_from:]
    assert instructions[last_from][1].split()[0].endswith("-slim")
    users = [args for keyword, args in final if keyword == "USER"]
    assert users and users[-1] not in ("root", "0")
    cmd = [args for keyword, args in final if keyword == "CMD"]
    assert json.loads(cmd[-1]) == shlex.split(procfile()["web"])
    assert {"8080", "8081"} <= {p for k, a in final if k == "EXPOSE" for p in a.split()}


def test_dockerfile_copies_only_what_exists_and_the_build_context_keeps() -> None:
    ignored = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert {".git", ".venv", "tests"} <= set(ignored)
    for keyword, args in _dockerfile():
        if keyword != "COPY" or args.startswith("--from"):
            continue
        for source in args.split()[:-1]:
            assert (ROOT / source).exists(), source
            assert not any(Path(source).match(pattern) for pattern in ignored), source


def test_dockerfile_copies_every_package_and_the_gunicorn_config_the_commands_load() -> None:
    copied = {
        source
        for keyword, args in _dockerfile()
        if keyword == "COPY" and not args.startswith("--from")
        for source in args.split()[:-1]
    }
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "bench"}
    assert packages <= copied, packages - copied
    assert "deploy/gunicorn.conf.py" in copied and "requirements.txt" in copied
