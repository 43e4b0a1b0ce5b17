"""Helpers shared by the service tests: the service's configuration, waiting, and the
check every reply must pass (errors are ``{"status", "message"}`` JSON), made by every test
client of the FracHub API as an httpx response hook: ``httpx.Client(..., event_hooks=CHECKED)``."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import httpx

CONFIG = """
c.FracHubService.queues = [
    {"name": "vision", "deserved_gpus": 1},
    {"name": "nlp", "deserved_gpus": 1},
    {"name": "guests", "deserved_gpus": 0, "members": ["guest-listed"]},
]
c.FracHubService.grace_period = {grace}
c.FracHubService.poll_interval = 0.1
c.FracHubService.cycle_interval = 1
c.LocalBackend.inventory_source = "declared"
c.LocalBackend.declared_inventory = [{{"name": "local", "gpus": {gpus}, "gpu_memory_gib": 80}}]
c.LocalBackend.run_as_user = False
# these tests make allocations with no server behind them (they act as the spawner): the
# check that releases an allocation whose server is gone is off unless a test turns it on
c.FracHubService.idle_check_interval = 0
"""


def service_config(gpus: int = 2, grace: float = 1.0, extra: str = "") -> str:
    return (
        CONFIG.replace("{grace}", str(grace))
        .replace("{gpus}", str(gpus))
        .replace("{{", "{")
        .replace("}}", "}")
        + extra
    )


def check_error_shape(response: httpx.Response) -> None:
    """Every error the API gives is JSON naming its status and saying what went wrong.

    A response hook, so no test has to remember it: it runs on every response of a client
    made with ``event_hooks=CHECKED``, before the test sees it, and a failed check fails the
    request that got it. A test that expects an error still asserts its status."""
    if response.status_code >= 400:
        response.read()  # a hook sees the response before its body is read
        assert response.headers["content-type"].startswith("application/json"), response.text
        body = response.json()
        assert body["status"] == response.status_code, body
        assert isinstance(body["message"], str) and body["message"], body


CHECKED: dict[str, list[Callable[[httpx.Response], Any]]] = {"response": [check_error_shape]}
"""The event hooks of every test client of the FracHub API."""


def wait_for(condition: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.1)


def cycles_completed(client: httpx.Client) -> int:
    """How many scheduling cycles the service behind ``client`` (a FracHub API client) has
    completed: the count of its cycle-duration histogram in the Prometheus metrics."""
    text = client.get("../../metrics").text
    found = re.search(r"^frachub_cycle_duration_seconds_count (\S+)$", text, re.M)
    assert found, "the metrics have no frachub_cycle_duration_seconds"
    return int(float(found.group(1)))


def wait_cycles(client: httpx.Client, count: int = 2, timeout: float = 20) -> None:
    """Until the service has completed ``count`` more scheduling cycles than now: the event to
    wait for before asserting that something did not happen. The first may have been under
    way already (its snapshot older than what the test just did), so the default is two."""
    first = cycles_completed(client)
    wait_for(
        lambda: cycles_completed(client) >= first + count,
        timeout,
        f"{count} more scheduling cycles than the {first} completed",
    )


def wait_token_refused(hub_api_url: str, token: str, timeout: float = 20) -> None:
    """Until the hub refuses ``token`` (a job's own, revoked when the job ends)."""
    wait_for(
        lambda: (
            httpx.get(
                f"{hub_api_url}/user", headers={"Authorization": f"token {token}"}, timeout=30
            ).status_code
            == 403
        ),
        timeout,
        "the hub to refuse the ended job's token",
    )


def workload(client: httpx.Client, workload_id: int) -> dict:
    return client.get(f"workloads/{workload_id}").json()


def wait_state(client: httpx.Client, workload_id: int, *states: str, timeout: float = 20) -> dict:
    last: dict = {}

    def reached() -> dict | None:
        nonlocal last
        last = workload(client, workload_id)
        return last if last["state"] in states else None

    try:
        return wait_for(reached, timeout, f"workload {workload_id} to be {'/'.join(states)}")
    except AssertionError as error:
        raise AssertionError(f"{error}; last seen: {last}") from None


def submit(client: httpx.Client, expect: int = 201, **body: Any) -> dict:
    body.setdefault("gpus", 1)
    body.setdefault("command", "sleep 60")
    response = client.post("workloads", json=body)
    assert response.status_code == expect, response.text
    return response.json()
