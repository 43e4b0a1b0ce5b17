"""CPU and memory in the Training panel, in a real Chromium against a real hub and service:
asked for in the submit form, shown in the job's row and its details; a job past its memory
fails with the kernel's kill in words."""

from __future__ import annotations

import sys

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser

HOG = f"{sys.executable} -c \"hog = b'x' * (256 * 2**20)\""


def test_cpu_and_memory_from_the_form_are_shown_and_enforced(
    page: Page, frachub, make_user, login, shot
) -> None:
    name, _ = make_user(groups=["vision"])
    login(page, name)
    page.fill("#frachub-command", HOG)
    page.select_option("#frachub-gpus", "0.25")
    page.fill("#frachub-cpu", "0.5")
    page.fill("#frachub-ram", "0.0625")
    page.fill("#frachub-name", "hungry")
    page.click("#frachub-submit-button")
    expect(page.locator("#frachub-submit-status")).to_contain_text("Submitted #")
    job = page.locator("#frachub-workloads-table tr.frachub-workload", has_text="hungry")
    expect(job.locator(".frachub-resources")).to_have_text("0.5 CPU, 64 MiB memory")
    expect(job.locator(".frachub-state")).to_have_text("failed", timeout=30_000)
    job.locator("a.frachub-name").click()
    facts = page.locator("#frachub-detail-facts")
    expect(facts).to_contain_text("0.5 CPU, 64 MiB memory")
    expect(facts).to_contain_text("killed: used more than its 64 MiB memory")
    shot("killed-past-its-memory")
