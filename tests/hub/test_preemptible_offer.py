"""Start now as a preemptible notebook, through the real hub, spawner and service: when a
notebook would wait at its project's quota, the spawn form and the spawn page offer to start
it preemptible; it starts at once on another project's idle GPU, says why in words, and is
stopped (its share revoked, the user's files kept) when that project needs its quota back.
Refused to a user the admin does not let run preemptible notebooks, and bad values are a 400
naming the option. The demo's vision (alice, bob) and nlp (carol) deserve one GPU each of
two; the "Spot GPU" profile (preemptible) is open to vision only, so with the default
``frachub_preemptible_offer = 'auto'`` alice and bob get the offer and carol never does.
Screenshots go to artifacts/screenshots/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from browser.browserharness import browser_page
from service_client import wait_for

from hub.upharness import Up, open_spawn_form

PROFILES = """
c.FracLocalSpawner.profile_list.append(
    {"display_name": "Spot GPU", "slug": "spot", "description": "May be stopped at any time.",
     "frachub": {"gpu_choices": [1], "preemptible": True, "allowed_groups": ["vision"]}},
)
c.Spawner.poll_interval = 1  # the spawner notices a revoked share within a second or two
"""
QUOTA_WORDS = "vision's notebooks already use its deserved 1 GPU"


@pytest.fixture(scope="module")
def offer_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    with Up(tmp_path_factory.mktemp("offer-up"), extra_hub_config=PROFILES) as up:
        yield up


@pytest.fixture(autouse=True)
def idle(offer_up: Up) -> Iterator[None]:
    yield
    for user in ("alice", "bob", "carol"):
        with offer_up.client(user) as client:
            servers = client.get(f"/hub/api/users/{user}").json().get("servers", {})
        for name in servers:
            offer_up.stop_server(user, name)


def bob_fills_vision(up: Up) -> None:
    up.start_server("bob", {"profile": "gpu", "gpus": 1})
    up.wait_ready("bob")


@pytest.fixture
def alices_form(offer_up: Up, browser, request) -> Iterator[tuple[Any, Any]]:
    """Bob's notebook holds vision's whole quota; alice signs in and opens the spawn form:
    (the page, its FracHub form)."""
    bob_fills_vision(offer_up)
    with browser_page(browser, offer_up.url, request) as page:
        yield page, open_spawn_form(page, offer_up, "alice")


def test_taken_offer_starts_at_once_says_why_and_is_stopped_for_the_owner(offer_up: Up) -> None:
    up = offer_up
    bob_fills_vision(up)
    response = up.start_server("alice", {"profile": "gpu", "gpus": 0.5, "preemptible": True})
    assert response.status_code in (201, 202), response.text
    up.wait_ready("alice")
    # the spawner's line (the spawn page's progress event, and the hub's log)
    (line,) = [
        line.split("alice: ", 1)[1]
        for line in up.log_path.read_text().splitlines()
        if "alice: Starting as a preemptible notebook" in line
    ]
    assert f"because vision is at its quota ({QUOTA_WORDS}" in line
    assert "may be stopped when others need their quota" in line
    assert "your files are kept" in line
    (allocation,) = up.allocations("alice", ["running"])
    assert (allocation["preemptible"], allocation["priority"]) == (True, 75)
    assert allocation["borrowed"]  # the panel's words: beyond vision's quota, whose GPU

    # carol claims nlp's quota: alice's borrowed share is revoked and her server stopped
    up.start_server("carol", {"profile": "gpu", "gpus": 1})
    up.wait_ready("carol", timeout=60)
    wait_for(lambda: up.server("alice") is None, 30, "alice's revoked server to stop")
    (revoked,) = [a for a in up.allocations("alice", ["revoked"]) if a["id"] == allocation["id"]]
    assert revoked["message"].startswith("preempted for nlp/"), revoked["message"]
    assert up.server("bob")["ready"]  # inside vision's quota: untouched


def test_asked_with_room_in_the_quota_it_starts_as_a_normal_notebook(offer_up: Up) -> None:
    up = offer_up
    mark = len(up.log_path.read_text())
    up.start_server("alice", {"profile": "gpu", "gpus": 0.5, "preemptible": True})
    up.wait_ready("alice")
    log = up.log_path.read_text()[mark:]
    assert "alice: Starting as a normal (non-preemptible) notebook instead: vision's quota" in log
    (allocation,) = up.allocations("alice", ["running"])
    assert allocation["preemptible"] is False


REFUSALS = [
    pytest.param(
        "carol",
        {"profile": "gpu", "gpus": 0.5, "preemptible": True},
        403,
        "user_options.preemptible: you may not start preemptible notebooks: no profile with "
        "preemptible notebooks is open to you",
        id="not-allowed",
    ),
    pytest.param(
        "alice",
        {"profile": "gpu", "gpus": 0.5, "preemptible": "yes"},
        400,
        "user_options.preemptible: must be true or false, got 'yes'",
        id="not-a-boolean",
    ),
    pytest.param(
        "alice",
        {"profile": "cpu", "preemptible": True},
        400,
        "user_options.preemptible: applies to a GPU notebook; profile 'cpu' gives no GPU",
        id="no-gpu",
    ),
]


@pytest.mark.parametrize(("user", "options", "status", "message"), REFUSALS)
def test_refused_at_once_naming_the_option(
    offer_up: Up, user: str, options: dict, status: int, message: str
) -> None:
    response = offer_up.start_server(user, options)
    assert response.status_code == status, response.text
    assert response.json()["message"] == message
    assert offer_up.allocations(user, ["pending", "running"]) == []  # no GPU was asked for


@pytest.mark.browser
def test_the_form_offers_it_and_the_user_who_takes_it_starts_now(
    offer_up: Up, alices_form, shot
) -> None:
    up = offer_up
    page, form = alices_form
    half = form.locator(".frachub-profile[data-profile='gpu'] .form-check", has_text="0.5 GPU")
    assert "would wait: " + QUOTA_WORDS in half.first.inner_text()
    offer = form.locator(".frachub-preemptible-offer[data-gpu='0.5']")
    assert "Start now as a preemptible notebook" in offer.inner_text()
    assert "starts now on" in offer.inner_text()  # where the preemptible one would go
    assert "may be stopped when others need their quota" in offer.inner_text()
    assert "files are kept" in offer.inner_text()
    assert form.locator(".frachub-preemptible-offer[data-gpu='2']").count() == 0  # never
    offer.locator("input").check()
    assert form.locator("input[name='gpu-gpu'][value='0.5']").is_checked()
    shot("offer-on-the-form", page)

    page.get_by_role("button", name="Start").click()
    page.wait_for_url(re.compile(r"/user/alice/lab"), timeout=90_000)
    (allocation,) = up.allocations("alice", ["running"])
    assert (allocation["gpus"], allocation["preemptible"]) == (0.5, True)

    # the Training panel: the notebook is preemptible and borrowed, each said in words
    page.goto(f"{up.url}/services/frachub/")
    row = page.locator(f".frachub-workload[data-id='{allocation['id']}']")
    row.wait_for(timeout=30_000)
    badge = row.locator(".frachub-preemptible")
    assert badge.inner_text() == "preemptible"
    assert "stopped when others need their quota" in badge.get_attribute("title")
    assert "files are kept" in badge.get_attribute("title")
    assert row.locator(".frachub-borrowed").get_attribute("title") == allocation["borrowed"]
    shot("panel-preemptible-notebook", page)


@pytest.mark.browser
def test_the_spawn_page_offers_it_while_the_notebook_waits(alices_form, offer_up: Up, shot) -> None:
    page, _ = alices_form
    page.locator(".frachub-profile[data-profile='gpu'] label", has_text="0.5 GPU").click()
    page.get_by_role("button", name="Start").click()
    page.wait_for_url(re.compile(r"/hub/spawn-pending/alice"))
    button = page.get_by_role("button", name="Start now as a preemptible notebook")
    button.wait_for(timeout=60_000)
    assert "position 1 in vision's queue" in page.locator("#progress-message").inner_text()
    assert (
        "may be stopped when others need their quota"
        in page.locator("#progress-message").inner_text()
    )
    shot("offer-on-the-spawn-page", page)
    button.click()
    page.wait_for_url(re.compile(r"/user/alice/lab"), timeout=90_000)
    (allocation,) = offer_up.allocations("alice", ["running"])
    assert (allocation["gpus"], allocation["preemptible"]) == (0.5, True)
    assert offer_up.server("bob")["ready"]


@pytest.mark.browser
def test_a_user_not_allowed_preemptible_notebooks_never_sees_the_offer(
    offer_up: Up, browser, request, shot
) -> None:
    up = offer_up
    up.start_server("carol", {"profile": "gpu", "gpus": 1}, name="first")  # nlp's whole quota
    up.wait_ready("carol", "first")
    with browser_page(browser, up.url, request) as page:
        form = open_spawn_form(page, up, "carol")
        half = form.locator(".frachub-profile[data-profile='gpu'] .form-check", has_text="0.5 GPU")
        assert (
            "would wait: nlp's notebooks already use its deserved 1 GPU" in half.first.inner_text()
        )
        assert form.locator(".frachub-preemptible-offer").count() == 0
        assert "Start now as a preemptible notebook" not in form.inner_text()
        shot("no-offer-for-carol", page)
        page.get_by_role("button", name="Start").click()
        page.wait_for_url(re.compile(r"/hub/spawn-pending/carol"))
        page.locator("#progress-message").filter(has_text="nlp's queue").wait_for(timeout=30_000)
        assert page.get_by_role("button", name="Start now as a preemptible notebook").count() == 0
