"""The spawn form's hints, in the real browser on the real ``frachub up --demo``, against what
then happens when the user clicks Start: a share free now starts at once; one that needs GPUs
another project borrowed says so and starts after the reclaim (the borrowing job goes back to
pending); one beyond what the quota allows now says it would wait and why, and the spawn page
then shows the same reason. The admin, who is in no project, sees CPU only pre-selected and
words for an admin. Screenshots of each go to artifacts/screenshots/; with
``FRACHUB_REFRESH_DOC_IMAGES=1`` they also replace docs/images/spawn-*.png (docs/hub.md), so
an ordinary run leaves the tracked images alone.

Demo: alice and bob in vision, carol in nlp (1 GPU deserved each), two GPUs, 2 s grace.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hub.upharness import SERVICE_API, Up, open_spawn_form
from playwright.sync_api import expect

from browser.browserharness import browser_page

pytestmark = pytest.mark.browser

DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
SLEEP = ["python", "-c", "import time; time.sleep(600)"]


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    with Up(tmp_path_factory.mktemp("up-hints")) as running:
        yield running


@pytest.fixture
def up_page(browser, up: Up, request: pytest.FixtureRequest) -> Iterator:
    with browser_page(browser, up.url, request) as page:
        yield page
    for user in ("alice", "bob", "carol", "admin"):
        up.stop_server(user)
    with up.admin_service() as api:
        for job in api.get("workloads", params={"active": 1}).json():
            if job["kind"] != "interactive":
                api.delete(f"workloads/{job['id']}")


def choice(form, label: str):
    return form.locator(".frachub-profile[data-profile='gpu'] .form-check", has_text=label).first


def keep(shot, name: str, page) -> None:
    """A screenshot for the run's artifacts; for the docs too when asked to refresh them."""
    taken = shot(name, page)
    if os.environ.get("FRACHUB_REFRESH_DOC_IMAGES") == "1":
        DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(taken, DOCS_IMAGES / f"{name}.png")


def service_as(up: Up, user: str) -> httpx.Client:
    return httpx.Client(
        base_url=f"{up.url}{SERVICE_API}",
        headers={"Authorization": f"token {up.token(user)}"},
        timeout=60,
    )


def wait_state(api: httpx.Client, path: str, state: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        item = api.get(path).json()
        if item["state"] == state:
            return item
        time.sleep(0.2)
    raise AssertionError(f"{path} is {item['state']}, not {state}")


def test_free_now_is_picked_and_starts(up: Up, up_page, shot) -> None:
    page = up_page
    form = open_spawn_form(page, up, "alice")
    assert "vision: 0 of 1 GPU in use" in form.inner_text()
    assert "fair share now 0" not in form.inner_text()
    half = choice(form, "0.5 GPU")
    assert "starts now on" in half.inner_text()
    assert half.locator("input").is_checked()  # the profile's default, and it can start
    two = choice(form, "2 GPUs")
    assert "vision deserves 1 GPU; a notebook of 2 GPUs can never start" in two.inner_text()
    assert two.locator("input").is_disabled()
    keep(shot, "spawn-hints-free-now", page)

    page.get_by_role("button", name="Start").click()
    page.wait_for_url(re.compile(r"/user/alice/lab"), timeout=90_000)
    (allocation,) = up.allocations("alice", ["running"])
    assert allocation["gpus"] == 0.5


def test_after_reclaim_says_whose_gpus_and_starts_after_the_reclaim(up: Up, up_page, shot) -> None:
    with service_as(up, "alice") as alice:
        job = alice.post("workloads", json={"command": SLEEP, "gpus": 2, "name": "borrower"})
        assert job.status_code == 201, job.text
        wait_state(alice, f"workloads/{job.json()['id']}", "running")

        page = up_page
        form = open_spawn_form(page, up, "carol")
        one = choice(form, "1 GPU")
        assert "starts after reclaiming GPUs that vision borrowed (1 workload)" in one.inner_text()
        assert "they get 2s to save their work" in one.inner_text()
        one.locator("label").click()
        keep(shot, "spawn-hints-after-reclaim", page)

        page.get_by_role("button", name="Start").click()
        page.wait_for_url(re.compile(r"/user/carol/lab"), timeout=90_000)
        (allocation,) = up.allocations("carol", ["running"])
        assert allocation["gpus"] == 1
        borrower = alice.get(f"workloads/{job.json()['id']}").json()
        assert borrower["state"] == "pending"  # evicted for carol, back in vision's queue


def test_would_wait_says_why_and_the_spawn_page_waits_for_that(up: Up, up_page, shot) -> None:
    up.start_server("bob", {"profile": "gpu", "gpus": 1})  # vision's whole quota
    up.wait_ready("bob")
    page = up_page
    form = open_spawn_form(page, up, "alice")
    quarter = choice(form, "0.25 GPU")
    reason = "vision's notebooks already use its deserved 1 GPU"
    assert "would wait: " + reason in quarter.inner_text()
    assert not quarter.locator("input").is_disabled()  # it can start later
    keep(shot, "spawn-hints-would-wait", page)

    page.get_by_role("button", name="Start").click()
    page.wait_for_url(re.compile(r"/hub/spawn-pending/alice"))
    page.locator("#progress-message").filter(has_text=reason).wait_for(timeout=30_000)


def test_an_admin_in_no_project_gets_cpu_and_words_for_an_admin(up: Up, up_page, shot) -> None:
    page = up_page
    form = open_spawn_form(page, up, "admin")
    text = form.inner_text()
    assert "You are in no FracHub project" in text and "add yourself to a project" in text
    assert "ask an admin" not in text.lower()
    assert page.locator("#profile-cpu").is_checked()
    assert page.locator("#profile-gpu").is_disabled()
    assert all(radio.is_disabled() for radio in form.locator("input[name='gpu-gpu']").all())
    keep(shot, "spawn-admin-no-project", page)
    # asked through the REST API anyway: one sentence, no exception class, no "ask an admin"
    refused = up.start_server("admin", {"profile": "gpu", "gpus": 0.5})
    assert refused.status_code == 403, refused.text
    message = refused.json()["message"]
    assert "SpawnException" not in message and "ask an admin" not in message.lower()
    assert "add yourself to a project" in message


def test_the_demo_admin_can_do_what_its_form_says(up: Up, up_page, shot) -> None:
    """The form sends the admin, in no project, to the hub's admin page: the hub's pages and
    FracHub's show it an Admin link, the page opens (not 403), and on it the admin may put
    itself in a project's group (not in the FracHub admins' group); then the form offers the
    project's GPUs."""
    page = up_page
    form = open_spawn_form(page, up, "admin")
    assert "its group on the hub's admin page (Admin, then Groups)" in form.inner_text()
    admin_link = page.locator(".navbar a.nav-link", has_text=re.compile("^Admin$"))
    expect(admin_link).to_have_count(1)
    page.goto(f"{up.url}/services/frachub/")
    page.locator("#frachub").wait_for()
    expect(admin_link).to_have_count(1)  # on FracHub's pages too
    expect(page.locator("#frachub-nav-admin")).to_have_text("GPU cluster")
    with page.expect_response(re.compile(r"/hub/admin")) as opened:
        admin_link.click()
    assert opened.value.status == 200
    expect(page.get_by_text("carol").first).to_be_visible()  # it may list the users
    keep(shot, "hub-admin-page-demo-admin", page)

    xsrf = page.evaluate("window.jhdata.xsrf_token")
    headers = {"X-XSRFToken": xsrf}
    members = f"{up.url}/hub/api/groups/vision/users"
    added = page.request.post(members, data={"users": ["admin"]}, headers=headers)
    try:
        assert added.ok, added.text()
        others = f"{up.url}/hub/api/groups/frachub-admins/users"
        barred = page.request.post(others, data={"users": ["alice"]}, headers=headers)
        # the hub hides what a scope does not reach: "No access to resources or not found"
        assert barred.status == 404 and "No access" in barred.text(), barred.text()
        # the service learns the group within its cache's 30 s; the form then offers vision
        deadline = time.monotonic() + 60
        while True:
            page.goto(f"{up.url}/hub/spawn")
            form = page.locator("#frachub-form")
            form.wait_for()
            if not page.locator("#profile-gpu").is_disabled():
                break
            assert time.monotonic() < deadline, form.inner_text()
            time.sleep(2)
        assert "vision:" in form.inner_text()
        assert "You are in no FracHub project" not in form.inner_text()
    finally:
        page.request.delete(members, data={"users": ["admin"]}, headers=headers)
