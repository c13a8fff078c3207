"""Redis Sentinel: the redis+sentinel:// URL, the clients built from it, and the engine on a
real primary, replica and three sentinels following a failover (kill -9, and a demotion)."""

from __future__ import annotations

import os
import time
import uuid

import pytest
import redis
from redis.sentinel import SentinelConnectionPool

from shared.connect.redis_conn import BlockingSentinelConnectionPool, connect, like, primary
from shared.engine.engine_types import Code, NotRunnable
from shared.engine.keys import Keys
from shared.engine.queries import get_job
from shared.engine.scripts import Scripts
from shared.model.jobs import validate_enqueue
from shared.settings.config import ConfigError, Settings, sentinel_target, summary
from tests.support.sentinel import SERVICE, SentinelDeployment, sentinel_deployment
from tests.support.tools import alive, wait_until

URL = "redis+sentinel://:pw@127.0.0.1:26390,sentinel-b:26391,[::1]/mymaster/3"
RESUME_BOUND = 30.0  # seconds a failover may take before the engine must work again


# --- the URL ----------------------------------------------------------------------------------


def test_a_sentinel_url_names_sentinels_service_db_and_password() -> None:
    target = sentinel_target(URL)
    assert target is not None
    assert target.sentinels == (("127.0.0.1", 26390), ("sentinel-b", 26391), ("::1", 26379))
    assert (target.service, target.db, target.username, target.password) == (
        "mymaster",
        3,
        None,
        "pw",
    )
    assert not target.tls
    assert "pw" not in repr(target)


def test_user_percent_encoded_password_tls_and_default_db() -> None:
    target = sentinel_target("rediss+sentinel://app:p%40ss@h:1/svc")
    assert target is not None
    assert (target.username, target.password, target.db, target.tls) == ("app", "p@ss", 0, True)


def test_other_urls_are_not_sentinel_urls() -> None:
    assert sentinel_target("redis://localhost:6379/0") is None
    assert sentinel_target("unix:///run/redis.sock") is None


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel://h:26379", "redis+sentinel://"),  # no service
        ("redis+sentinel://h:26379/", "service"),
        ("redis+sentinel://h:26379/svc/x", "db is a number"),
        ("redis+sentinel://h:99999/svc", "host:port"),
        ("redis+sentinel://h:1,,h:2/svc", "host:port"),
        ("redis+sentinel://h:1/svc?db=1", "no query string"),
        ("sentinel://h:1/svc", "redis://, rediss:// or unix://"),
    ],
)
def test_a_bad_sentinel_url_stops_start_up_naming_redis_url(url: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"REDIS_URL": url})
    assert str(info.value).startswith("REDIS_URL=")
    assert says in str(info.value)


def test_a_bad_sentinel_url_hides_its_password() -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"REDIS_URL": "redis+sentinel://:hunter2@h:1/svc/x"})
    assert "hunter2" not in str(info.value)


def test_the_sentinel_password_is_a_secret_setting() -> None:
    settings = Settings.from_env({"REDIS_URL": URL, "REDIS_SENTINEL_PASSWORD": "s3cret"})
    assert settings.redis_sentinel_password == "s3cret"
    assert "s3cret" not in repr(settings)
    lines = summary(settings)
    assert "REDIS_SENTINEL_PASSWORD=(set)" in lines
    assert "REDIS_URL=redis+sentinel://:***@127.0.0.1:26390,sentinel-b:26391,[::1]/mymaster/3" in (
        lines
    )


# --- the clients (no server needed: pools connect lazily) -------------------------------------


def test_connect_builds_a_sentinel_pool_for_the_primary() -> None:
    settings = Settings.from_env(
        {"REDIS_URL": URL, "REDIS_SENTINEL_PASSWORD": "s3cret", "REDIS_SOCKET_TIMEOUT": "2s"}
    )
    client = connect(settings, role="worker")
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool) and pool.is_master
    assert pool.service_name == "mymaster"
    kwargs = pool.connection_kwargs
    assert (kwargs["db"], kwargs["password"], kwargs["socket_timeout"]) == (3, "pw", 2.0)
    assert kwargs["client_name"] == f"taskforge-worker-{os.getpid()}"
    asking = pool.sentinel_manager.sentinels[0].connection_pool.connection_kwargs
    assert (asking["host"], asking["port"], asking["password"]) == ("127.0.0.1", 26390, "s3cret")
    assert asking["retry"].get_retries() == 0  # the next sentinel is the retry
    assert primary(client) is None  # no connection yet


def test_a_bounded_sentinel_pool_waits_like_the_gateways() -> None:
    settings = Settings.from_env({"REDIS_URL": URL})
    client = connect(settings, role="gateway", max_connections=8, pool_wait=0.2)
    pool = client.connection_pool
    assert isinstance(pool, BlockingSentinelConnectionPool)
    assert (pool.max_connections, pool.timeout) == (8, 0.2)


def test_like_keeps_the_sentinel_service() -> None:
    client = connect(Settings.from_env({"REDIS_URL": URL}), role="gateway")
    twin = like(client, max_connections=1, socket_timeout=7.0)
    pool = twin.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.sentinel_manager is client.connection_pool.sentinel_manager
    assert pool.connection_kwargs["socket_timeout"] == 7.0
    assert pool.connection_kwargs["connection_pool"] is pool.proxy  # its own, not the origin's


def test_tls_reaches_sentinels_and_data_nodes_alike() -> None:
    settings = Settings.from_env(
        {"REDIS_URL": "rediss+sentinel://:pw@h:1/svc", "REDIS_SSL_CERT_REQS": "none"}
    )
    pool = connect(settings, role="w").connection_pool
    assert issubclass(pool.connection_class, redis.SSLConnection)
    assert pool.connection_kwargs["ssl_cert_reqs"] == "none"
    asking = pool.sentinel_manager.sentinels[0].connection_pool
    assert issubclass(asking.connection_class, redis.SSLConnection)


# --- a real deployment ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deployment() -> SentinelDeployment:
    with sentinel_deployment() as running:
        yield running


def _engine(deployment: SentinelDeployment) -> Scripts:
    settings = Settings.from_env({"REDIS_URL": deployment.url, "REDIS_SOCKET_TIMEOUT": "1s"})
    return Scripts(connect(settings, role="test"), Keys())


def _round_trip(scripts: Scripts, queue: str) -> str:
    """Enqueue, claim and complete one job; return its id."""
    job_id = str(uuid.uuid4())
    scripts.enqueue(validate_enqueue({"type": "t", "queue": queue}), job_id)
    claimed = scripts.claim("w-sentinel", queue=queue)
    assert claimed is not None and not isinstance(claimed, NotRunnable)
    assert claimed.id == job_id
    assert scripts.complete(job_id, claimed.token, "1", queue=queue).code is Code.DONE
    return job_id


USED = ("enqueue", "claim", "complete")  # the scripts a round trip runs


def _scripts_on(server_client: redis.Redis, scripts: Scripts) -> list[bool]:
    """Return whether `server_client`'s server holds each of the USED scripts."""
    return server_client.script_exists(*(scripts.transport.shas[name] for name in USED))


@pytest.mark.slow
def test_the_engine_follows_a_kill_9_of_the_primary(deployment: SentinelDeployment) -> None:
    scripts = _engine(deployment)
    queue = f"q-{uuid.uuid4().hex[:6]}"
    before = _round_trip(scripts, queue)
    old_port = deployment.primary_port()
    assert old_port is not None and primary(scripts.redis) == f"127.0.0.1:{old_port}"
    # Let the replica hold the first job, so the promoted one still has it.
    old_client = deployment.server_on(old_port).client()
    assert old_client.wait(1, 5000) == 1
    old_client.close()

    deployment.kill_primary()
    killed = time.monotonic()
    new = deployment.wait_for_promotion(old_port)
    new_client = new.client(socket_timeout=2)
    try:
        assert not any(_scripts_on(new_client, scripts))  # a replica's cache starts empty

        def works() -> str | None:
            try:
                return _round_trip(scripts, queue)
            except redis.exceptions.ConnectionError:
                return None  # the sentinels may still name the dead primary for a moment

        after = wait_until(works, RESUME_BOUND, "the engine on the promoted replica", 0.1)
        print(f"\nengine resumed {time.monotonic() - killed:.2f} s after the kill")
        assert primary(scripts.redis) == f"127.0.0.1:{new.port}"
        assert all(_scripts_on(new_client, scripts))  # loaded again on NOSCRIPT
        for job_id in (before, after):
            found = get_job(new_client, Keys(), job_id, [queue])
            assert found is not None and found.status.value == "completed"
    finally:
        new_client.close()


def _role(client: redis.Redis) -> bytes | None:
    """The server's role, or None while its connection is being cut: Sentinel reconfigures
    a demoted primary with REPLICAOF and CLIENT KILL TYPE normal in one transaction, so a
    probe connected before it is reset by the peer (CI saw this once)."""
    try:
        return client.role()[0]
    except redis.exceptions.ConnectionError:
        return None


@pytest.mark.slow
def test_a_demoted_primary_answering_readonly_is_followed_not_failed() -> None:
    """SENTINEL FAILOVER demotes a live primary: pooled connections to it get READONLY on the
    next script, which must send the call to the new primary, never fail it."""
    with sentinel_deployment() as deployment:
        scripts = _engine(deployment)
        queue = f"q-{uuid.uuid4().hex[:6]}"
        _round_trip(scripts, queue)
        old_port = deployment.primary_port()
        assert old_port is not None
        sentinel = deployment.sentinels[0].client()
        try:
            assert sentinel.sentinel_failover(SERVICE)
        finally:
            sentinel.close()
        deployment.wait_for_promotion(old_port)
        old = deployment.server_on(old_port).client(socket_timeout=2)
        try:
            # The old primary is now a replica: a write there is refused with READONLY.
            wait_until(lambda: _role(old) == b"slave", RESUME_BOUND, "the demotion")
            with pytest.raises(redis.exceptions.ReadOnlyError):
                old.set("x", "1")
        finally:
            old.close()
        assert primary(scripts.redis) == f"127.0.0.1:{old_port}"  # still pooled there
        _round_trip(scripts, queue)  # READONLY → rediscovery → the new primary, no error
        assert primary(scripts.redis) != f"127.0.0.1:{old_port}"


@pytest.mark.slow
def test_the_deployment_leaves_no_process_behind() -> None:
    with sentinel_deployment() as deployment:
        pids = [s.pid for s in deployment.servers]
        pids += [s.process.pid for s in deployment.sentinels if s.process is not None]
        assert len(pids) == 5 and all(alive(pid) for pid in pids)
    assert not any(alive(pid) for pid in pids)
