"""Outages say so: a hub that refuses connections or never answers, and a database that is
down, answer 503 ``{"status", "message"}`` naming what is unavailable, within the service's
``hub_timeout``, never with the hub's URL or a host name, and never a request that hangs."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from hubharness import ServiceProcess, free_port
from service_client import CHECKED, service_config, submit

from scheduler.service.hub.directory import HubDirectory, HubDirectoryError

HUB_TIMEOUT = 2.0
TIMEOUT_CONFIG = f"\nc.FracHubService.hub_timeout = {HUB_TIMEOUT}\n"
PATIENCE = 3 * HUB_TIMEOUT + 5
"""How long a test waits for any answer: past the service's own bound, well short of a hang."""


@contextlib.contextmanager
def silent_hub() -> Iterator[str]:
    """A "hub" that accepts connections, reads what it is sent and never answers; its API
    URL. Every connection is closed when the block ends, so nothing outlives the test."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection.settimeout(0.2)
            held.append(connection)
            with contextlib.suppress(OSError):
                connection.recv(65536)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/hub/api"
    finally:
        stop.set()
        server.close()
        thread.join(5)
        for connection in held:
            connection.close()


@contextlib.contextmanager
def hub_at(kind: str) -> Iterator[str]:
    """The API URL of a hub that is down: "refusing" (a closed port) or "silent"."""
    if kind == "refusing":
        yield f"http://127.0.0.1:{free_port()}/hub/api"
    else:
        with silent_hub() as url:
            yield url


def assert_unavailable(response: httpx.Response, what: str, url: str) -> None:
    assert response.status_code == 503, response.text
    body = response.json()
    assert set(body) == {"status", "message"} and body["status"] == 503, body
    assert f"the {what} is unavailable" in body["message"], body
    port = url.split(":")[2].split("/")[0] if url.count(":") >= 2 else None
    internals = ["127.0.0.1", "http://", "localhost", socket.gethostname()]
    internals += [port] if port else []
    for internal in internals:
        assert internal not in body["message"], (internal, body)


@pytest.mark.parametrize("kind", ["refusing", "silent"])
def test_a_hub_that_is_down_answers_503_in_time_without_internals(
    hub, tmp_path, make_user, kind
) -> None:
    _, token = make_user(groups=["vision"])
    with hub_at(kind) as api_url:
        service = ServiceProcess(
            hub,
            service_config(extra=TIMEOUT_CONFIG),
            tmp_path,
            env={"JUPYTERHUB_API_URL": api_url},
        ).start()
        try:
            with httpx.Client(
                base_url=service.api_url, timeout=PATIENCE, event_hooks=CHECKED
            ) as client:
                for method, path in (("GET", "workloads"), ("POST", "workloads"), ("GET", "user")):
                    started = time.monotonic()
                    response = client.request(
                        method,
                        path,
                        headers={"Authorization": f"token {token}"},
                        json={"command": "true"} if method == "POST" else None,
                    )
                    took = time.monotonic() - started
                    assert_unavailable(response, "hub", api_url)
                    assert took < HUB_TIMEOUT + 2, f"{method} {path} took {took:.1f} s"
                # the health check needs no hub: the service itself is up
                assert client.get("health").status_code == 200
        finally:
            service.stop()


@pytest.mark.parametrize("kind", ["refusing", "silent"])
def test_a_group_lookup_on_a_hub_that_is_down_says_so_in_time(kind) -> None:
    """The directory (a user's groups, asked with the service's token) gives up after its
    timeout, in words that name the hub and nothing of where it is."""

    async def lookup(url: str) -> str:
        directory = HubDirectory(url, "service-token", ttl=0)
        directory.timeout = HUB_TIMEOUT
        with pytest.raises(HubDirectoryError) as refused:
            await directory.groups_of("alice")
        return str(refused.value)

    with hub_at(kind) as url:
        started = time.monotonic()
        message = asyncio.run(asyncio.wait_for(lookup(url), PATIENCE))
        took = time.monotonic() - started
    assert message.startswith("the hub is unavailable"), message
    assert "127.0.0.1" not in message and url.split(":")[2].split("/")[0] not in message
    assert took < HUB_TIMEOUT + 2, took


def test_a_database_that_is_down_answers_503_and_recovers(hub, tmp_path, make_user) -> None:
    """PostgreSQL stopped under a running service: requests that need it answer 503 "the
    database is unavailable" (no host, no port); started again, they work again."""
    from postgres import PostgresServer

    with PostgresServer() as database:
        url = database.database()
        service = ServiceProcess(
            hub,
            service_config(extra=f"\nc.FracHubService.db_url = {url!r}\n"),
            tmp_path,
        ).start()
        _, token = make_user(groups=["vision"])
        pg_ctl = [str(database.bin / "pg_ctl"), "-D", str(database.data)]
        try:
            with httpx.Client(
                base_url=service.api_url,
                headers={"Authorization": f"token {token}"},
                timeout=PATIENCE,
                event_hooks=CHECKED,
            ) as client:
                submit(client, command="true", gpus=0.25)
                database._run(*pg_ctl, "-m", "immediate", "stop")
                for method, path in (("GET", "workloads?state=succeeded"), ("POST", "workloads")):
                    response = client.request(
                        method,
                        path,
                        json={"command": "true", "gpus": 0.25} if method == "POST" else None,
                    )
                    assert_unavailable(response, "database", url)
                    assert str(database.port) not in response.json()["message"]
                database._run(
                    *pg_ctl,
                    "-l",
                    str(database.root / "server.log"),
                    "-o",
                    f"-p {database.port} -c listen_addresses=127.0.0.1 -k {database.root}",
                    "-w",
                    "start",
                )
                deadline = time.monotonic() + 30
                while (response := client.get("workloads")).status_code != 200:
                    assert time.monotonic() < deadline, response.text
                    time.sleep(0.5)
                assert service.running
        finally:
            service.stop()
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                database._run(*pg_ctl, "-m", "immediate", "stop")
