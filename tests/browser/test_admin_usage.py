"""The admin page with usage-decayed fair share on: each project's recent use, and how it
moved its fair share, in words (docs/scheduling.md, "Usage-decayed fair share"). The
module's service decays a day of samples in which ``vision`` held the whole cluster."""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hubharness import API_PATH, Hub, ServiceProcess
from playwright.sync_api import Page, expect
from service_client import CHECKED, service_config, submit, wait_state

pytestmark = pytest.mark.browser

USAGE = """
c.FracHubService.queues = [{"name": "vision"}, {"name": "nlp"}]
c.FracHubService.usage_sample_interval = 0.5
c.FracHubService.fair_share_usage = True
c.FracHubService.fair_share_usage_refresh_seconds = 1
"""


def _past_day(database: Path, now: float) -> None:
    """Samples every ten minutes of the last day: vision held both GPUs, nlp none."""
    rows = [
        (now - k * 600.0, project, held, 0.0, 1.0, 1, 0, 2.0)
        for k in range(1, 145)
        for project, held in (("vision", 2.0), ("nlp", 0.0), ("", 2.0))
    ]
    with sqlite3.connect(database) as db:
        db.executemany(
            "INSERT INTO usage_samples (time, project, allocated_gpus, deserved_gpus, "
            "fair_share_gpus, running, pending, cluster_gpus) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )


@pytest.fixture(scope="module")
def frachub_process(
    oauth_hub: Hub, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    """This module's service: usage-decayed fair share on, with yesterday's samples."""
    where = tmp_path_factory.mktemp("frachub-usage")
    service = ServiceProcess(oauth_hub, service_config(gpus=2, grace=1.0, extra=USAGE), where)
    service.start()
    service.stop()  # the store exists now; give it yesterday's samples
    _past_day(where / "frachub-data" / "frachub.sqlite", time.time())
    with service:
        yield service


def test_the_admin_page_shows_recent_use_and_how_it_moved_the_share(
    page: Page, frachub, oauth_hub: Hub, make_user, login, shot
) -> None:
    _, vision_token = make_user(groups=["vision"])
    _, nlp_token = make_user(groups=["nlp"])
    admin, _ = make_user(admin=True)
    with (
        httpx.Client(
            base_url=oauth_hub.service_url(API_PATH),
            headers={"Authorization": f"token {nlp_token}"},
            timeout=30,
            event_hooks=CHECKED,
        ) as nlp,
        httpx.Client(
            base_url=oauth_hub.service_url(API_PATH),
            headers={"Authorization": f"token {vision_token}"},
            timeout=30,
            event_hooks=CHECKED,
        ) as vision,
    ):
        for k in range(2):
            wait_state(nlp, submit(nlp, command="sleep 120", gpus=1, name=f"n{k}")["id"], "running")
        submit(vision, command="sleep 120", gpus=1, name="v0")
        login(page, admin)
        page.click("#frachub-nav-admin")
        page.wait_for_url(re.compile(r"/services/frachub/admin$"))
        row = page.locator("#frachub-queues-table tr[data-queue='vision']")
        expect(row.locator(".frachub-fair-share-note")).to_have_text(
            re.compile(r"^lowered from 1 GPU by its recent use \(\d+% of the cluster's, decayed\)$")
        )
        expect(row.locator(".frachub-recent-use")).to_have_text(re.compile(r"^(9\d|100)%$"))
        other = page.locator("#frachub-queues-table tr[data-queue='nlp']")
        expect(other.locator(".frachub-fair-share-note")).to_contain_text("raised from 1 GPU")
        waiting = page.locator("#frachub-active-table tr.frachub-workload", has_text="v0")
        expect(waiting).to_contain_text(
            "vision has no GPU quota; borrowed GPUs are all taken; its recent use lowered its "
            "fair share"
        )
        shot("admin-recent-use")
