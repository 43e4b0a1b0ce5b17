"""Fixtures for the browser tests and the cookie-path API tests: one real JupyterHub (with
its proxy and the panel's OAuth settings) per session, one frachub service per module,
emptied between tests, and a real headless Chromium driven by Playwright.

    oauth_hub   the session's Hub; frachub is external, with oauth_client_allowed_scopes
    frachub     the module's ServiceProcess (2 declared GPUs), with no active workload
                when the test starts and after it ends
    make_user   make_user(groups=(), admin=False) -> (name, token): a unique hub user
    browser     the module's Chromium (Debian's; scripts/browser.sh installs it)
    page        a Playwright page in a fresh context; a screenshot is saved if the test fails
    login       login(page, name): through the panel URL to the hub's login form and back
    shot        shot(name): a screenshot of the page into artifacts/screenshots/

Without Chromium the browser tests fail, naming scripts/browser.sh: they never skip. As in
tests/service, a missing jupyterhub or configurable-http-proxy skips, except in CI.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import httpx
import pytest
from hubharness import API_PATH, Hub, ServiceProcess, running_hub
from service_client import CHECKED, service_config

from browser.browserharness import OAUTH_CONFIG, browser_page, clear_workloads, fill_login_form
from browser.fixtures import (  # noqa: F401 (a conftest registers what it holds)
    chromium,
    pytest_runtest_makereport,
    shot,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

_serial = itertools.count(1)


@pytest.fixture(scope="session")
def oauth_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with running_hub(tmp_path_factory.mktemp("oauth-hub"), extra_config=OAUTH_CONFIG) as running:
        yield running


@pytest.fixture(scope="module")
def frachub_process(
    oauth_hub: Hub, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    service = ServiceProcess(
        oauth_hub, service_config(gpus=2, grace=1.0), tmp_path_factory.mktemp("frachub")
    )
    with service:
        yield service


@pytest.fixture(scope="module")
def janitor(oauth_hub: Hub, frachub_process: ServiceProcess) -> Iterator[httpx.Client]:
    """An admin's API client that clears the cluster between tests."""
    name = f"janitor-{next(_serial)}"
    oauth_hub.create_user(name, admin=True)
    with httpx.Client(
        base_url=oauth_hub.service_url(API_PATH),
        headers={"Authorization": f"token {oauth_hub.token_for(name)}"},
        timeout=30,
        event_hooks=CHECKED,
    ) as client:
        yield client


@pytest.fixture
def frachub(frachub_process: ServiceProcess, janitor: httpx.Client) -> Iterator[ServiceProcess]:
    """The module's service, handed on as the test found it: nothing active (starting a
    service per test would cost seconds each)."""
    clear_workloads(janitor)
    yield frachub_process
    clear_workloads(janitor)


@pytest.fixture
def make_user(oauth_hub: Hub, request: pytest.FixtureRequest) -> Callable[..., tuple[str, str]]:
    """make_user(groups=(), admin=False) -> (name, token), unique for the session."""
    stem = request.node.name.split("[")[0].removeprefix("test_").replace("_", "-")[:24]

    def make(groups: Sequence[str] = (), admin: bool = False) -> tuple[str, str]:
        name = f"{stem}-{next(_serial)}"
        oauth_hub.create_user(name, admin=admin, groups=groups)
        return name, oauth_hub.token_for(name)

    return make


@pytest.fixture
def page(browser: Browser, oauth_hub: Hub, request: pytest.FixtureRequest) -> Iterator[Page]:
    with browser_page(browser, oauth_hub.url, request) as opened:
        yield opened


@pytest.fixture
def login(oauth_hub: Hub) -> Callable[[Page, str], None]:
    """login(page, name): open the panel, which sends the browser to the hub's login form;
    fill it in and come back to the panel through the hub's OAuth."""

    def log_in(page: Page, name: str) -> None:
        page.goto(oauth_hub.service_url())
        page.wait_for_url(re.compile(r"/hub/login"))
        fill_login_form(page, name)
        page.wait_for_url(oauth_hub.service_url())
        page.wait_for_selector("#frachub")

    return log_in
