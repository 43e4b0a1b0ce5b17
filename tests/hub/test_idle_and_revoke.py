"""Idle GPU notebooks and preemptible notebooks, through the real hub, spawner and service:
the panel warns before an idle notebook is stopped through the hub API, and a preemptible
notebook whose share is revoked for in-quota work has its server stopped by the spawner."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest
from browser.browserharness import browser_page, fill_login_form

from hub.upharness import PASSWORD, Up

PROFILES = """
c.FracLocalSpawner.profile_list.extend([
    {"display_name": "Short-lived GPU", "slug": "short",
     "frachub": {"gpu_choices": [0.25], "idle_timeout_seconds": 20}},
    {"display_name": "Spot GPU", "slug": "spot",
     "frachub": {"gpu_choices": [1], "preemptible": True}},
])
c.Spawner.poll_interval = 1  # the spawner notices a revoked share within a second or two
"""
SERVICE = """
c.FracHubService.idle_check_interval = 1
c.FracHubService.idle_warning_fraction = 0.3  # warned after 6 idle seconds, stopped after 20
"""


@pytest.fixture(scope="module")
def short_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    with Up(
        tmp_path_factory.mktemp("short-up"),
        extra_hub_config=PROFILES,
        extra_service_config=SERVICE,
    ) as up:
        yield up


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.mark.browser
def test_idle_notebook_is_warned_in_the_panel_then_stopped(
    short_up: Up, browser, request, shot
) -> None:
    up = short_up
    with browser_page(browser, up.url, request) as page:
        page.goto(f"{up.url}/services/frachub/")
        page.wait_for_url(re.compile(r"/hub/login"))
        fill_login_form(page, "alice", PASSWORD)
        page.wait_for_url(re.compile(r"/services/frachub/"))

        up.start_server("alice", {"profile": "short"})
        up.wait_ready("alice")
        (allocation,) = up.allocations("alice", ["running"])
        assert allocation["idle_timeout_seconds"] == 20

        warning = page.locator(".frachub-idle-warning")
        warning.first.wait_for(timeout=30_000)
        assert "0.25 GPU" in warning.first.inner_text()
        shot("panel-idle-warning", page)

    # the service stops the server through the hub; the spawner releases the share
    wait_for(lambda: up.server("alice") is None, 60, "the idle server to be stopped")
    wait_for(
        lambda: allocation["id"] in [a["id"] for a in up.allocations("alice", ["released"])],
        30,
        "the idle notebook's share to be released",
    )
    with up.admin_service() as api:
        events = api.get(f"workloads/{allocation['id']}").json()["events"]
    kinds = [event["type"] for event in events]
    assert kinds.index("idle-warning") < kinds.index("idle-stop")


def test_revoked_preemptible_notebook_is_stopped_by_its_spawner(short_up: Up) -> None:
    up = short_up
    # vision's quota is 1 GPU: alice's spot notebook fits, bob's borrows nlp's idle GPU
    up.start_server("alice", {"profile": "spot"})
    up.wait_ready("alice")
    up.start_server("bob", {"profile": "spot"})
    up.wait_ready("bob")
    (bobs,) = up.allocations("bob", ["running"])

    # carol (nlp) claims her quota: bob's borrowed share is revoked
    up.start_server("carol", {"profile": "gpu", "gpus": 0.5})
    up.wait_ready("carol", timeout=60)
    wait_for(lambda: up.server("bob") is None, 30, "bob's revoked server to stop")
    (revoked,) = [a for a in up.allocations("bob", ["revoked"]) if a["id"] == bobs["id"]]
    # why, for whom and what it lost, in words (reasons.evicted)
    assert revoked["message"].startswith("preempted for nlp/"), revoked["message"]
    assert "lost" in revoked["message"]
    assert up.server("alice")["ready"]  # inside vision's quota: untouched
    for user in ("alice", "carol"):
        up.stop_server(user)
