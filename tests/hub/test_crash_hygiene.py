"""A hub killed with SIGKILL leaves its proxy, scheduler service and notebook servers running;
the next ``frachub up`` on the same data directory must stop (or, for servers, adopt) every
one of them, start its own service on the same port, and leave nothing behind when stopped."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from hubharness import _start_time, descendants, identify

from hub.upharness import SERVICE_API, Up
from scheduler.service.persistence import datalock


def alive(processes: dict[int, int]) -> dict[int, int]:
    return {pid: t for pid, t in processes.items() if _start_time(pid) == t}


def wait_gone(processes: dict[int, int], timeout: float = 30) -> dict[int, int]:
    deadline = time.monotonic() + timeout
    while alive(processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(processes)


def test_a_restart_after_the_hub_is_sigkilled_leaves_no_orphans(tmp_path: Path) -> None:
    up = Up(tmp_path).start()
    try:
        assert up.start_server("alice", {"profile": "cpu"}).status_code in (201, 202)
        up.wait_ready("alice")
        hub = int((up.data / "jupyterhub.pid").read_text())
        service = datalock.holder(str(up.data / "frachub-service.lock"))
        proxy = int((up.data / "jupyterhub-proxy.pid").read_text())
        assert up.proc is not None
        first_run = identify([up.proc.pid, *descendants(up.proc.pid)])
        assert service in first_run and proxy in first_run and hub in first_run
        servers = {pid: t for pid, t in first_run.items() if pid not in (up.proc.pid, hub)}
        servers = {pid: t for pid, t in servers.items() if pid not in (service, proxy)}
        assert servers, "alice's server is among the hub's children"

        # the crash: the hub and its frachub up die at once, nothing can clean up
        os.kill(hub, signal.SIGKILL)
        up.proc.send_signal(signal.SIGKILL)
        up.proc.wait()
        up.proc = None
        orphans = alive({pid: t for pid, t in first_run.items() if pid not in (hub,)})
        assert service in orphans and proxy in orphans, "SIGKILL left the service and proxy"

        up.start()  # same data directory, same ports
        assert not alive({service: first_run[service], proxy: first_run[proxy]})
        new_service = datalock.holder(str(up.data / "frachub-service.lock"))
        assert new_service and new_service != service
        with up.client("alice") as client:
            assert client.get(f"{SERVICE_API}user").status_code == 200
        # alice's server was adopted by the new hub, which knows it from its database
        assert up.server("alice") is not None and up.server("alice")["ready"]
        assert "left by a previous run" in up.log_text()
        # both runs logged to the rotating files in the data directory, not only the terminal
        logs = up.data / "hub-logs"
        assert "Starting managed service frachub" in (logs / "jupyterhub.log").read_text()
        assert "listening on" in (logs / "frachub-service.log").read_text()
        assert logs.stat().st_mode & 0o777 == 0o700
        second_run = identify([up.proc.pid, *descendants(up.proc.pid)])
    finally:
        up.stop(reap=False)
    # stopped the ordinary way, nothing of either run is left
    left = wait_gone({**first_run, **second_run})
    assert left == {}, f"orphans after a hub SIGKILL and a restart: {left}"


def test_a_second_service_on_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    fd = datalock.hold(str(tmp_path / "frachub-service.lock"))
    try:
        assert datalock.holder(str(tmp_path / "frachub-service.lock")) == os.getpid()
        with pytest.raises(datalock.Held) as held:
            datalock.hold(str(tmp_path / "frachub-service.lock"))
        assert held.value.pid == os.getpid()
    finally:
        os.close(fd)
    assert datalock.holder(str(tmp_path / "frachub-service.lock")) is None
