"""Fixtures for the hub tests: the real ``frachub up --demo``, shared by the session.

    up        the running Up (tests/hub/upharness.py): demo users alice and bob (project
              vision, 1 GPU deserved), carol (nlp, 1 GPU), admin (FracHub admin); two
              declared GPUs; a 2 s preemption grace period
    kernel    kernel(user, server_name="") -> Kernel in that user's running server

After each test every demo user's servers are stopped and their jobs cancelled, so tests
start from an idle cluster. Every test here is marked ``hub``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from browser.browserharness import browser_page
from browser.fixtures import (  # noqa: F401 (a conftest registers what it holds)
    chromium,
    pytest_runtest_makereport,
    shot,
)

from hub.upharness import Kernel, Up

HERE = Path(__file__).resolve().parent
DEMO_USERS = ("alice", "bob", "carol", "admin")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.hub)


@pytest.fixture(scope="session")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    with Up(tmp_path_factory.mktemp("up")) as running:
        yield running


@pytest.fixture(autouse=True)
def idle_cluster(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "up" not in request.fixturenames:
        return
    up: Up = request.getfixturevalue("up")
    if up.proc is None:
        return
    for user in DEMO_USERS:
        with up.client(user) as client:
            servers = client.get(f"/hub/api/users/{user}").json().get("servers", {})
        for name in servers:
            up.stop_server(user, name)
    with up.admin_service() as api:
        for job in api.get("workloads", params={"state": "pending,running"}).json():
            with contextlib.suppress(Exception):
                api.delete(f"workloads/{job['id']}")


@pytest.fixture
def kernel(up: Up) -> Iterator[Callable[..., Kernel]]:
    started: list[Kernel] = []

    def start(user: str, server_name: str = "") -> Kernel:
        started.append(Kernel(up, user, server_name))
        return started[-1]

    yield start
    for k in started:
        with contextlib.suppress(Exception):
            k.shutdown()


@pytest.fixture
def up_page(browser, up: Up, request: pytest.FixtureRequest) -> Iterator:
    """A fresh browser page on the hub that ``frachub up`` serves."""
    with browser_page(browser, up.url, request) as page:
        yield page
