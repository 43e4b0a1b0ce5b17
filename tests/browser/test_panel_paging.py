"""The panel and the admin page against a service that answers two workloads a page: the
panel still lists (and counts as "yours") every active job however many pages it takes,
and the admin page shows the newest active ones and says how many there are in all."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from hubharness import API_PATH, Hub, ServiceProcess
from playwright.sync_api import Page, expect
from service_client import CHECKED, service_config, submit, wait_state

pytestmark = pytest.mark.browser

PAGES = "\nc.FracHubService.page_default_limit = 2\nc.FracHubService.page_max_limit = 2\n"


@pytest.fixture(scope="module")
def frachub_process(
    oauth_hub: Hub, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    """This module's service: one GPU, two workloads a page."""
    service = ServiceProcess(
        oauth_hub,
        service_config(gpus=1, grace=1.0, extra=PAGES),
        tmp_path_factory.mktemp("frachub-paging"),
    )
    with service:
        yield service


def test_every_active_job_is_listed_and_the_admin_sees_how_many(
    page: Page, frachub, oauth_hub: Hub, make_user, login, shot
) -> None:
    name, token = make_user(groups=["vision"])
    with httpx.Client(
        base_url=oauth_hub.service_url(API_PATH),
        headers={"Authorization": f"token {token}"},
        timeout=30,
        event_hooks=CHECKED,
    ) as client:
        active = [submit(client, command="sleep 120", gpus=1)["id"] for _ in range(4)]
        wait_state(client, active[0], "running")
        ended = [submit(client, command="sleep 120", gpus=1)["id"] for _ in range(2)]
        for job in ended:  # the two newest: the only ones a single page would show
            client.delete(f"workloads/{job}")
            wait_state(client, job, "cancelled")

    login(page, name)
    for job in active + ended:
        expect(page.locator(f"#frachub-workloads-table tr[data-id='{job}']")).to_have_count(1)
    expect(page.locator("#frachub-workloads-table tr.frachub-workload")).to_have_count(6)
    project = page.locator("#frachub-projects-table tr[data-project='vision']")
    expect(project.locator(".frachub-allocated")).to_contain_text("(yours 1)")
    shot("panel-every-active-job")

    admin, _ = make_user(admin=True)
    page.context.clear_cookies()
    login(page, admin)
    page.click("#frachub-nav-admin")
    page.wait_for_url(re.compile(r"/services/frachub/admin$"))
    rows = page.locator("#frachub-active-table tr.frachub-workload")
    expect(rows).to_have_count(2)
    expect(rows.first).to_have_attribute("data-id", str(active[-1]))
    expect(page.locator("#frachub-active-table .frachub-active-more")).to_have_text(
        "The newest 2 of 4 active workloads; frachub jobs --all-users lists every one."
    )
    shot("admin-newest-active")
