"""Plain helpers for the browser tests and the cookie-path API tests (no pytest in here):
the hub configuration the panel needs, Chromium's launch settings, logging in through the
hub's real login form with httpx, and reading the XSRF token a page carries.

``tests/browser/conftest.py`` wraps them in fixtures.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from hubharness import ADMIN_SCOPE, PASSWORD, READ_SCOPE, SERVICE_NAME, SUBMIT_SCOPE, Hub

from scheduler.common.paths import TEMPLATES_DIR

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "artifacts" / "screenshots"
CHROMIUM = "/usr/bin/chromium"

# What the hub must say for the panel to work: the OAuth token a browser session gets
# holds the user's FracHub scopes (without this it holds only access:services, and the API
# refuses it), and admin-ui for those who hold it (the hub's Admin link); the hub skips its
# "authorize this application?" page for the hub's own scheduler; and the hub's pages load
# FracHub's page.html (the "Training" link).
# Members of the group HUB_ADMIN_PAGE_GROUP may open the hub's admin page (admin-ui), as a
# hub admin may; the harness's token cannot make hub admins.
PANEL_OAUTH_SCOPES = [READ_SCOPE, SUBMIT_SCOPE, ADMIN_SCOPE, "admin-ui"]
HUB_ADMIN_PAGE_GROUP = "hub-admin-page"
OAUTH_CONFIG = f"""
for _service in c.JupyterHub.services:
    if _service["name"] == {SERVICE_NAME!r}:
        _service["oauth_client_allowed_scopes"] = {PANEL_OAUTH_SCOPES!r}
        _service["oauth_no_confirm"] = True
c.JupyterHub.template_paths = [{str(TEMPLATES_DIR)!r}]
c.JupyterHub.load_roles.append(
    {{
        "name": "admin-page",
        "scopes": ["admin-ui", "list:users", "read:users", "list:groups", "read:groups"],
        "groups": [{HUB_ADMIN_PAGE_GROUP!r}],
    }}
)
c.JupyterHub.load_groups = {{**c.JupyterHub.load_groups, {HUB_ADMIN_PAGE_GROUP!r}: {{"users": []}}}}
"""

# Chromium on a closed network: no sandbox (root in a container), no GPU, and none of the
# background connections (updates, sync, QUIC probes) it would otherwise try and fail.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
]

MISSING_CHROMIUM = (
    "Chromium is not installed at {path}: run `source scripts/browser.sh` (it installs "
    "Debian's chromium; scripts/test.sh and CI do this), or point FRACHUB_CHROMIUM at a "
    "Chromium binary. Playwright's own browser download is not used."
)


def chromium_path() -> str:
    """The Chromium binary the tests launch ($FRACHUB_CHROMIUM, else Debian's)."""
    return os.environ.get("FRACHUB_CHROMIUM") or CHROMIUM


def chromium_problem() -> str | None:
    """Why Chromium cannot be launched, or None."""
    path = chromium_path()
    if os.access(path, os.X_OK):
        return None
    return MISSING_CHROMIUM.format(path=path)


_XSRF_IN_PAGE = re.compile(r'xsrf_token:\s*"([^"]+)"')


def page_xsrf_token(html: str) -> str:
    """The XSRF token the hub's page.html puts in ``window.jhdata``."""
    found = _XSRF_IN_PAGE.search(html)
    if not found:
        raise AssertionError("no xsrf_token in the page")
    return found.group(1)


def hub_login(client: httpx.Client, name: str, password: str = PASSWORD) -> None:
    """Log in through the hub's login form, as a browser does (the form's XSRF token
    included), leaving the hub's session cookie in client's jar."""
    form = client.get("/hub/login")
    form.raise_for_status()
    answer = client.post(
        "/hub/login",
        data={"username": name, "password": password, "_xsrf": page_xsrf_token(form.text)},
        follow_redirects=False,  # on to the user's server otherwise, which these hubs lack
    )
    if answer.status_code != 302 or "/hub/login" in answer.headers.get("Location", ""):
        raise AssertionError(f"login as {name} failed: {answer.status_code} {answer.text[:300]}")


def fill_login_form(page: Page, name: str, password: str = PASSWORD) -> None:
    """Sign in on the hub's login form the page shows (SharedPasswordAuthenticator)."""
    page.fill("input#username_input", name)
    page.fill("input#password_input", password)
    page.click("#login_submit")


def panel_session(hub: Hub, name: str) -> tuple[httpx.Client, str]:
    """A logged-in browser-like client of ``name`` that went through the hub's OAuth to the
    panel (so it holds the service's cookie), and the XSRF token the panel gave it."""
    client = httpx.Client(base_url=hub.url, follow_redirects=True, timeout=30)
    hub_login(client, name)
    panel = client.get(hub.service_url())
    if panel.status_code != 200 or 'id="frachub"' not in panel.text:
        client.close()
        raise AssertionError(f"panel for {name}: {panel.status_code} {panel.url}")
    return client, page_xsrf_token(panel.text)


def clear_workloads(admin: httpx.Client, timeout: float = 30) -> None:
    """End every active job and notebook allocation (admin is an admin's API client), and
    wait until none holds a GPU: the next test starts on an empty cluster."""
    deadline = time.monotonic() + timeout
    while True:
        active = admin.get("workloads", params={"active": 1, "limit": 500})
        active.raise_for_status()
        if not active.json():
            return
        for workload in active.json():
            if workload["state"] not in ("pending", "running", "preempting"):
                continue  # on its way out already
            kind = "allocations" if workload["kind"] == "interactive" else "workloads"
            ended = admin.delete(f"{kind}/{workload['id']}")
            if ended.status_code not in (200, 404, 409):
                ended.raise_for_status()
        if time.monotonic() > deadline:
            raise AssertionError(f"workloads still active after {timeout:g}s: {active.json()}")
        time.sleep(0.1)


BROWSER_TIMEOUT_MS = 15_000


def test_file_name(node_name: str) -> str:
    """A test's name as a file name stem."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", node_name).strip("-")


@contextlib.contextmanager
def browser_page(browser: Browser, base_url: str, request: Any) -> Iterator[Page]:
    """A page in a fresh context on base_url; screenshotted into SCREENSHOTS if the test
    (``request.node``) failed."""
    context = browser.new_context(base_url=base_url, viewport={"width": 1360, "height": 900})
    context.set_default_timeout(BROWSER_TIMEOUT_MS)
    page = context.new_page()
    try:
        yield page
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            try:
                path = SCREENSHOTS / f"{test_file_name(request.node.name)}-FAILED.png"
                page.screenshot(path=str(path), full_page=True)
            except Exception as error:  # a crashed page must not hide the test's own failure
                print(f"no failure screenshot: {error}")
        context.close()
