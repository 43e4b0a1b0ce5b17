"""Fixtures shared by the browser tests of the panel (tests/browser/) and of the hub's own
pages (tests/hub/): one headless Chromium per module, fresh pages, and screenshots kept as
the run's artifacts in artifacts/screenshots/. Each of those folders' conftest imports them
(a conftest registers the fixtures and hooks it holds), so no other level loads the browser
harness.

    browser        Debian's Chromium driven by Playwright (scripts/browser.sh installs it)
    shot           shot(name, page=None): a screenshot of the page, numbered per test
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from browser.browserharness import (
    CHROMIUM_ARGS,
    SCREENSHOTS,
    chromium_path,
    chromium_problem,
    test_file_name,
)

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator:
    """Keep each phase's report on the item, so a page knows its test failed."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture(scope="module", name="browser")
def chromium() -> Iterator[Browser]:
    """Module-scoped, not session-scoped: Playwright's sync API keeps an asyncio loop
    running in this thread while it is open, and tests that call asyncio.run() may follow."""
    problem = chromium_problem()
    if problem:
        pytest.fail(problem, pytrace=False)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def shot(request: pytest.FixtureRequest) -> Callable[..., Path]:
    """shot(name, page=None) saves ``<test>-<nn>-<name>.png``; kept as the run's artifacts."""
    test = test_file_name(request.node.name)
    counter = itertools.count(1)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(name: str, page: Page | None = None) -> Path:
        target = page or request.getfixturevalue("page")
        path = SCREENSHOTS / f"{test}-{next(counter):02d}-{name}.png"
        target.screenshot(path=str(path), full_page=True)
        return path

    return take
