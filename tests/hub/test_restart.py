"""A hub restart neither loses nor double-counts a notebook's GPU share."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time

import pytest

from hub.upharness import Up


@pytest.fixture
def keeping_up(tmp_path) -> Up:
    # servers outlive the hub, as on a production hub restarted for an upgrade
    with Up(tmp_path, extra_hub_config="c.JupyterHub.cleanup_servers = False\n") as up:
        yield up


def test_hub_restart_keeps_the_share_of_a_running_notebook(keeping_up: Up, kernel) -> None:
    up = keeping_up
    up.start_server("carol", {"profile": "gpu", "gpus": 0.5})
    up.wait_ready("carol")
    (before,) = up.allocations("carol", ["running"])

    up.restart()

    server = up.wait_ready("carol")
    assert server["ready"]
    (after,) = up.allocations("carol", ["pending", "running"])
    assert after["id"] == before["id"] and after["state"] == "running"
    # starting it again while it runs is refused by the hub; the share is not asked twice
    assert up.start_server("carol", {"profile": "gpu", "gpus": 0.5}).status_code == 400
    assert len(up.allocations("carol", ["pending", "running"])) == 1

    up.stop_server("carol")
    assert up.allocations("carol", ["pending", "running"]) == []


def test_share_of_a_server_that_died_with_the_hub_is_released(keeping_up: Up) -> None:
    up = keeping_up
    up.start_server("alice", {"profile": "gpu", "gpus": 0.25})
    up.wait_ready("alice")
    (held,) = up.allocations("alice", ["running"])
    up.stop(reap=False)
    with sqlite3.connect(up.data / "jupyterhub.sqlite") as db:
        (state,) = db.execute("select state from spawners where state like '%pid%'").fetchone()
    os.kill(json.loads(state)["pid"], signal.SIGKILL)  # the server dies while the hub is down

    up.start()
    # the hub's start-up poll finds the server gone, and the spawner releases its share
    deadline = time.monotonic() + 30
    while up.allocations("alice", ["pending", "running"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert up.allocations("alice", ["pending", "running"]) == []
    assert held["id"] in [a["id"] for a in up.allocations("alice", ["released"])]


def test_a_restarted_service_releases_the_share_of_a_server_stopped_while_it_was_down(
    tmp_path,
) -> None:
    """At hub shutdown the service stops before the servers, so a stopping server cannot
    release its share; the restarted service asks the hub at once which servers run and
    releases the rest, rather than showing the share running until its first idle check
    (a minute later)."""
    with Up(tmp_path) as up:
        up.start_server("alice", {"profile": "gpu", "gpus": 0.25})
        up.wait_ready("alice")
        (held,) = up.allocations("alice", ["running"])
        up.stop()
        said = up.log_text()
        assert "check frachub_api_url" not in said  # nothing is misconfigured
        assert f"allocation {held['id']} not released yet: the FracHub service did not" in said

        up.start()
        started = time.monotonic()
        while up.allocations("alice", ["pending", "running"]) and time.monotonic() < started + 20:
            time.sleep(0.2)
        assert up.allocations("alice", ["pending", "running"]) == []
        assert held["id"] in [a["id"] for a in up.allocations("alice", ["released"])]
