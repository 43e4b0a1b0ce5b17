"""Fixtures for the service tests: one real JupyterHub (and proxy) per test session.

    hub            the session's Hub, frachub registered as an external service
    make_user      make_user(groups=(), admin=False, scopes=None, name=None) -> (name, token)
    api            api(token) -> httpx.Client on the frachub API through the proxy
    start_service  start_service(config_text, command=None, env=None) -> ServiceProcess
                   (external mode, stopped after the test)
    postgres       a throwaway PostgreSQL server for the session (tests/postgres.py);
                   ``database_config(request, kind)`` puts a service on SQLite or on it

Every test in this folder is marked ``service``; ``pytest -m "not service"`` skips them.
Without jupyterhub or configurable-http-proxy (source scripts/proxy.sh) they skip,
except in CI (CI=true), where that is an error.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import httpx
import pytest
from hubharness import API_PATH, Hub, ServiceProcess, running_hub
from postgres import PostgresServer
from service_client import CHECKED

HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    # harmless once pyproject.toml registers the marker too
    config.addinivalue_line("markers", "service: against a real JupyterHub and proxy")


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.service)


@pytest.fixture(scope="session")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    with running_hub(tmp_path_factory.mktemp("hub")) as running:
        yield running


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """One throwaway PostgreSQL cluster for the session (tests/postgres.py)."""
    with PostgresServer() as server:
        yield server


DATABASES = ["sqlite", "postgresql"]
"""Params of the fixtures that run the service core on both stores."""


def database_config(request: pytest.FixtureRequest, kind: str) -> str:
    """Config lines putting the service's store on ``kind``: nothing for SQLite (the default
    file in the data dir), a fresh database on the session's server for PostgreSQL."""
    if kind == "sqlite":
        return ""
    server: PostgresServer = request.getfixturevalue("postgres")
    return f"\nc.FracHubService.db_url = {server.database()!r}\n"


_serial = itertools.count(1)


@pytest.fixture
def make_user(hub: Hub, request: pytest.FixtureRequest) -> Callable[..., tuple[str, str]]:
    """make_user(groups=(), admin=False, scopes=None, name=None) -> (name, token).

    Users live for the whole session (one hub), so names are unique: the test's name
    and a counter unless name is given. admin=True makes a FracHub admin. scopes=None
    gives the token all the user's permissions; pass e.g. [hubharness.ACCESS_SCOPE] for
    a token without the custom scopes.
    """
    stem = request.node.name.split("[")[0].removeprefix("test_").replace("_", "-")[:30]

    def make(
        groups: Sequence[str] = (),
        admin: bool = False,
        scopes: Sequence[str] | None = None,
        name: str | None = None,
    ) -> tuple[str, str]:
        name = name or f"{stem}-{next(_serial)}"
        hub.create_user(name, admin=admin, groups=groups)
        return name, hub.token_for(name, scopes=scopes)

    return make


@pytest.fixture
def api(hub: Hub) -> Iterator[Callable[[str], httpx.Client]]:
    """api(token) -> httpx.Client with base_url the frachub API through the proxy
    (…/services/frachub/api/v1/) and ``Authorization: token …``, whose every error reply is
    checked for its shape (service_client.CHECKED). Closed after the test."""
    clients: list[httpx.Client] = []

    def client(token: str, **kwargs) -> httpx.Client:
        c = httpx.Client(
            base_url=hub.service_url(API_PATH),
            headers={"Authorization": f"token {token}"},
            timeout=kwargs.pop("timeout", 30),
            event_hooks=CHECKED,
            **kwargs,
        )
        clients.append(c)
        return c

    yield client
    for c in clients:
        c.close()


@pytest.fixture
def start_service(hub: Hub, tmp_path: Path) -> Iterator[Callable[..., ServiceProcess]]:
    """start_service(config_text, command=None, env=None) -> a started ServiceProcess
    bound where the hub expects frachub; stopped after the test."""
    started: list[ServiceProcess] = []

    def start(
        config_text: str,
        command: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> ServiceProcess:
        service = ServiceProcess(
            hub, config_text, tmp_path / f"service{len(started)}", command=command, env=env
        )
        started.append(service)
        return service.start()

    yield start
    for service in started:
        service.stop()
