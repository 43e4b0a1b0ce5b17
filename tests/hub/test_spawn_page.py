"""The hub's own pages with FracHub in them, in a real browser: log in, pick "0.5 GPU" on the
spawn form, see JupyterLab start; with the quota full, see the queue position on the spawn
page, and the notebook start when the quota frees up. Screenshots go to
artifacts/screenshots/."""

from __future__ import annotations

import re

import pytest

from hub.upharness import Up, open_spawn_form

pytestmark = pytest.mark.browser


def test_pick_half_a_gpu_and_the_notebook_starts(up: Up, up_page, shot) -> None:
    page = up_page
    form = open_spawn_form(page, up, "alice")
    assert page.locator("nav").get_by_role("link", name="Training").is_visible()
    assert "vision: 0 of 1 GPU in use" in form.inner_text()
    half = form.locator(".frachub-profile[data-profile='gpu'] label", has_text="0.5 GPU")
    assert "starts now on" in half.inner_text()  # the scheduler's dry run
    two = form.locator(".frachub-profile[data-profile='gpu'] label", has_text="2 GPUs")
    assert "vision deserves 1 GPU; a notebook of 2 GPUs can never start" in two.inner_text()
    assert form.locator("input[name='gpu-gpu'][value='2']").is_disabled()
    half.click()
    shot("spawn-form-half-gpu", page)

    page.get_by_role("button", name="Start").click()
    page.wait_for_url(re.compile(r"/user/alice/lab"), timeout=90_000)
    page.locator(".jp-Launcher").first.wait_for(timeout=90_000)  # JupyterLab has loaded
    shot("jupyterlab-started", page)
    (allocation,) = up.allocations("alice", ["running"])
    assert allocation["gpus"] == 0.5


def test_full_quota_shows_the_queue_position_on_the_spawn_page(up: Up, up_page, shot) -> None:
    # bob's notebook holds vision's whole deserved GPU
    up.start_server("bob", {"profile": "gpu", "gpus": 1})
    up.wait_ready("bob")

    page = up_page
    open_spawn_form(page, up, "alice")
    page.locator(".frachub-profile[data-profile='gpu'] label", has_text="0.5 GPU").click()
    page.get_by_role("button", name="Start").click()

    page.wait_for_url(re.compile(r"/hub/spawn-pending/alice"))
    message = page.locator("#progress-message")
    message.filter(has_text="position 1 in vision's queue").wait_for(timeout=30_000)
    assert "deserved 1 GPU" in message.inner_text()
    page.locator("#progress-details").evaluate("details => details.open = true")
    shot("spawn-pending-queue-position", page)

    up.stop_server("bob")  # the quota frees up: the notebook starts on its own
    page.wait_for_url(re.compile(r"/user/alice/lab"), timeout=90_000)
    shot("notebook-started-after-waiting", page)
