"""Idle GPU notebooks against a real JupyterHub running real single-user servers.

This module starts a hub of its own whose spawner is JupyterHub's SimpleLocalProcessSpawner
(``jupyterhub-singleuser`` as the hub's user, with ``--allow-root`` when that is root), and a
frachub service checking idleness every half second. A notebook's allocation is asked for the
way the spawner asks (the service's token, ``"user": name``), with a 4-second idle limit, so
the warning comes after 3.2 s and the stop at 4 s. Nothing here releases allocations when a
server stops (that is the FracHub spawner's job), so the service's own "the hub has no such
server any more" release is what ends them.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from hubharness import API_PATH, Hub, ServiceProcess, running_hub
from service_client import CHECKED, service_config, wait_for

IDLE_LIMIT = 4
SINGLEUSER = Path(sys.executable).with_name("jupyterhub-singleuser")


def hub_config(home: Path) -> str:
    args = ["--allow-root"] if os.geteuid() == 0 else []
    return f"""
c.JupyterHub.spawner_class = "jupyterhub.spawner.SimpleLocalProcessSpawner"
c.JupyterHub.allow_named_servers = True
c.SimpleLocalProcessSpawner.home_dir_template = {str(home / "{username}")!r}
c.Spawner.cmd = [{str(SINGLEUSER)!r}]
c.Spawner.args = {args!r}
c.Spawner.start_timeout = 60
c.Spawner.http_timeout = 60
"""


@pytest.fixture(scope="module")
def gpu_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    work = tmp_path_factory.mktemp("idle-hub")
    with running_hub(work, extra_config=hub_config(work / "home")) as hub:
        yield hub


@pytest.fixture(scope="module")
def service(gpu_hub: Hub, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    extra = 'c.FracHubService.idle_check_interval = 0.5\nc.Application.log_level = "INFO"\n'
    config = service_config(gpus=2, extra=extra)
    process = ServiceProcess(gpu_hub, config, tmp_path_factory.mktemp("idle-service")).start()
    yield process
    process.stop()


@pytest.fixture
def spawner_api(gpu_hub: Hub, service: ServiceProcess) -> Iterator[httpx.Client]:
    """The frachub API with the service's own token, as the FracHub spawner calls it."""
    with httpx.Client(
        base_url=gpu_hub.service_url(API_PATH),
        headers={"Authorization": f"token {gpu_hub.frachub_token}"},
        timeout=30,
        event_hooks=CHECKED,
    ) as client:
        yield client


class Researcher:
    """A hub user in project vision, with a token for the Hub API."""

    def __init__(self, hub: Hub, name: str) -> None:
        hub.create_user(name, groups=["vision"])
        self.name = name
        self.hub = hub
        self.client = httpx.Client(
            base_url=hub.api_url,
            headers={"Authorization": f"token {hub.token_for(name)}"},
            timeout=30,
        )

    def servers(self) -> dict:
        return self.client.get(f"users/{self.name}").raise_for_status().json()["servers"]

    def start(self, server_name: str = "") -> None:
        path = (
            f"users/{self.name}/servers/{server_name}"
            if server_name
            else f"users/{self.name}/server"
        )
        response = self.client.post(path)
        assert response.status_code in (201, 202), response.text
        wait_for(
            lambda: self.servers().get(server_name, {}).get("ready"),
            60,
            f"{self.name}'s server {server_name!r} to be ready",
        )

    def report_activity(self, server_name: str) -> None:
        """What jupyterhub-singleuser does when its user works in it."""
        now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        response = self.client.post(
            f"users/{self.name}/activity",
            json={"servers": {server_name: {"last_activity": now}}},
        )
        assert response.status_code < 300, response.text

    def close(self) -> None:
        self.client.close()


@pytest.fixture
def researcher(gpu_hub: Hub, request: pytest.FixtureRequest) -> Iterator[Researcher]:
    name = request.node.name.removeprefix("test_").replace("_", "-")[:24].rstrip("-")
    person = Researcher(gpu_hub, name)
    yield person
    person.close()


def allocate(api: httpx.Client, user: str, server_name: str = "", **body) -> dict:
    created = api.post(
        "allocations",
        json={"user": user, "server_name": server_name, "gpus": 0.5, **body},
    )
    assert created.status_code == 201, created.text
    return wait_for(
        lambda: (
            (v := api.get(f"allocations/{created.json()['id']}").json())["state"] == "running" and v
        ),
        what="the allocation to run",
    )


def events(api: httpx.Client, allocation_id: int) -> list[tuple[str, str]]:
    detail = api.get(f"workloads/{allocation_id}").json()
    return [(event["type"], event["message"]) for event in detail["events"]]


WARNING = re.compile(
    r"idle since \d\d:\d\d UTC; this notebook's 0\.5 GPU will be released and the server "
    r"stopped at \d\d:\d\d UTC unless it is used"
)


def test_an_idle_notebook_is_warned_then_stopped_and_its_gpu_released(
    spawner_api: httpx.Client, researcher: Researcher, service: ServiceProcess
) -> None:
    researcher.start()
    allocation = allocate(spawner_api, researcher.name, idle_timeout_seconds=IDLE_LIMIT)
    assert allocation["idle_timeout_seconds"] == IDLE_LIMIT
    url = f"allocations/{allocation['id']}"
    first = wait_for(lambda: (v := spawner_api.get(url).json())["idle_stop_at"] and v, 10)
    warned = wait_for(
        lambda: (v := spawner_api.get(url).json())["idle_warning"] and v, 15, "the warning"
    )
    assert WARNING.fullmatch(warned["idle_warning"]), warned["idle_warning"]
    assert warned["state"] == "running" and researcher.servers(), "warned, not yet stopped"
    stop_at = datetime.fromisoformat(warned["idle_stop_at"]).timestamp()
    started = datetime.fromisoformat(allocation["started_at"]).timestamp()
    assert stop_at - started == pytest.approx(IDLE_LIMIT, abs=1.0), (first, warned)
    wait_for(lambda: researcher.servers() == {}, 30, "the hub to stop the idle server")
    released = wait_for(
        lambda: (v := spawner_api.get(url).json())["state"] == "released" and v,
        15,
        "the allocation to be released",
    )
    assert released["idle_warning"] is None and released["idle_stop_at"] is None
    types = [kind for kind, _ in events(spawner_api, allocation["id"])]
    assert types.count("idle-warning") == 1, types
    assert types.index("idle-warning") < types.index("idle-stop") < types.index("server-gone")
    assert types[-1] == "released"
    log = service.log_text()
    assert f"warned {researcher.name}'s default server" in log
    assert f"stopping {researcher.name}'s default server" in log
    # the GPU is free again
    assert all(
        not gpu["holders"] for node in spawner_api.get("nodes").json() for gpu in node["gpus"]
    )


def test_a_notebook_in_use_keeps_its_server_until_it_falls_idle(
    spawner_api: httpx.Client, researcher: Researcher
) -> None:
    researcher.start("gpu")
    allocation = allocate(spawner_api, researcher.name, "gpu", idle_timeout_seconds=IDLE_LIMIT)
    url = f"allocations/{allocation['id']}"
    working_until = time.monotonic() + 2 * IDLE_LIMIT
    while time.monotonic() < working_until:
        researcher.report_activity("gpu")
        view = spawner_api.get(url).json()
        assert view["state"] == "running" and view["idle_warning"] is None, view
        time.sleep(0.5)
    assert researcher.servers()["gpu"]["ready"]
    assert "idle-warning" not in [kind for kind, _ in events(spawner_api, allocation["id"])]
    # the user walks away: warned, then the named server is stopped
    wait_for(lambda: spawner_api.get(url).json()["idle_warning"], 15, "the warning")
    wait_for(lambda: "gpu" not in researcher.servers(), 30, "the hub to stop the server")
    wait_for(lambda: spawner_api.get(url).json()["state"] == "released", 15, "the release")


def test_a_warning_is_withdrawn_when_the_notebook_is_used_again(
    spawner_api: httpx.Client, researcher: Researcher
) -> None:
    researcher.start()
    allocation = allocate(spawner_api, researcher.name, idle_timeout_seconds=IDLE_LIMIT)
    url = f"allocations/{allocation['id']}"
    wait_for(lambda: spawner_api.get(url).json()["idle_warning"], 15, "the warning")
    researcher.report_activity("")
    wait_for(lambda: spawner_api.get(url).json()["idle_warning"] is None, 5, "the withdrawal")
    assert researcher.servers()[""]["ready"]
    types = [kind for kind, _ in events(spawner_api, allocation["id"])]
    assert types[-2:] == ["idle-warning", "idle-cleared"], types
    # left alone again, it is warned anew and stopped
    wait_for(lambda: researcher.servers() == {}, 30, "the hub to stop the server")
    wait_for(lambda: spawner_api.get(url).json()["state"] == "released", 15, "the release")


def test_an_allocation_whose_server_is_gone_is_released_with_or_without_an_idle_limit(
    spawner_api: httpx.Client, researcher: Researcher
) -> None:
    """The hub has no server for these (as after a hub shutdown, which stops the service
    before the servers): both are released, and only the one with a limit was judged."""
    watched = allocate(spawner_api, researcher.name, "x", idle_timeout_seconds=3600)
    unwatched = allocate(spawner_api, researcher.name, "y")
    for allocation, server in ((watched, "x"), (unwatched, "y")):
        gone = wait_for(
            lambda a=allocation: (
                (v := spawner_api.get(f"allocations/{a['id']}").json())["state"] == "released" and v
            ),
            10,
            "the release of an allocation whose server is gone",
        )
        kinds = events(spawner_api, gone["id"])
        assert "idle-warning" not in [kind for kind, _ in kinds]
        assert ("server-gone", f"the hub no longer has {researcher.name}'s server '{server}'") in (
            kinds
        )
