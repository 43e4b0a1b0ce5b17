"""A gang that can never start, submitted from the panel in a real Chromium: 2 GPUs × 3
replicas on a 2-GPU machine is refused at once with the engine's reason on one line under
the form, and nothing appears in the user's list."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser


def test_a_gang_larger_than_the_cluster_is_refused_in_words(
    page: Page, frachub, make_user, login, shot
) -> None:
    name, _ = make_user(groups=["vision"])
    login(page, name)
    page.fill("#frachub-command", "python train.py")
    page.select_option("#frachub-gpus", "2")
    page.fill("#frachub-replicas", "3")
    page.click("#frachub-submit-button")
    status = page.locator("#frachub-submit-status")
    expect(status).to_have_class(re.compile("text-danger"))
    expect(status).to_contain_text(
        "a job that can never start here: even on the idle cluster it needs 3 replicas × 2 GPUs"
    )
    assert "\n" not in status.inner_text() and "Error" not in status.inner_text()
    shot("gang-refused")
    expect(page.locator("#frachub-workloads-table tr[data-id]")).to_have_count(0)
