"""bin/run: starts a private Redis, and Ctrl-C leaves nothing running."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest
import redis

from tests._tools import free_port, require_tool

ROOT = Path(__file__).resolve().parent.parent


def port_answers(port: int) -> bool:
    """Return whether a Redis server answers PING on 127.0.0.1:port."""
    client = redis.Redis(port=port, socket_connect_timeout=0.5)
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False
    finally:
        client.close()


@pytest.mark.slow
def test_bin_run_starts_private_redis_and_stops_everything_on_ctrl_c(tmp_path: Path) -> None:
    require_tool("redis-server")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env |= {
        "TASKFORGE_REDIS_PORT": str(port),
        "TASKFORGE_REDIS_DIR": str(tmp_path / "redis"),
        # Whatever parts exist start too: keep them off ports a developer may be using.
        "PORT_PRODUCER": str(free_port()),
        "PORT_WORKER": str(free_port()),
    }
    # Its own process group, like a terminal job: we signal only the script, as Ctrl-C would.
    run = subprocess.Popen(
        [str(ROOT / "bin/run")],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    # Bounds the whole test: a hung bin/run is killed, which ends the read loop below.
    watchdog = threading.Timer(60, os.killpg, (run.pid, signal.SIGKILL))
    watchdog.start()
    try:
        seen = []
        for line in run.stderr:  # type: ignore[union-attr]
            seen.append(line)
            if "running; Ctrl-C stops everything." in line:
                break
        assert any(f"redis://127.0.0.1:{port}/0" in line for line in seen), seen
        assert port_answers(port)
        run.send_signal(signal.SIGINT)
        _, rest = run.communicate(timeout=60)
    finally:
        watchdog.cancel()
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode == 0, [*seen, rest]
    assert "stopped." in rest
    assert not port_answers(port)
    assert (tmp_path / "redis" / "appendonlydir").is_dir()
