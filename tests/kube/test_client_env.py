"""The Kubernetes client's session looks for a proxy and a netrc file per request only where
there could be one (``scheduler.backends.kubernetes.client.environment_proxies_or_netrc``):
aiohttp's ``trust_env`` costs two thread hops per request, a tenth of the service's CPU in
benchmarks/kai_scale.py's fill, and finds nothing on a machine without either."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes_asyncio import client

from scheduler.backends.kubernetes.client import Kube, environment_proxies_or_netrc

from .conftest import run

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY")


@pytest.fixture
def bare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No proxy variable and a home without a netrc file."""
    for name in (*PROXY_VARIABLES, "ALL_PROXY", "ws_proxy", "wss_proxy", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def trusts_environment(kube: Kube) -> bool:
    return bool(kube.api_client.rest_client.pool_manager._trust_env)


def test_without_proxy_or_netrc_the_environment_is_not_read_per_request(bare: Path) -> None:
    async def scenario() -> None:
        assert not environment_proxies_or_netrc()
        kube = Kube(client.Configuration())
        try:
            assert not trusts_environment(kube)
        finally:
            await kube.close()

    run(scenario)


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "http_proxy", "netrc", "NETRC"])
def test_a_proxy_or_a_netrc_file_keeps_the_environment_trusted(
    bare: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    if variable == "netrc":
        (bare / ".netrc").write_text("machine example.org login a password b\n")
    elif variable == "NETRC":
        (bare / "elsewhere").write_text("machine example.org login a password b\n")
        monkeypatch.setenv("NETRC", str(bare / "elsewhere"))
    else:
        monkeypatch.setenv(variable, "http://proxy.example.org:3128")

    async def scenario() -> None:
        assert environment_proxies_or_netrc()
        kube = Kube(client.Configuration())
        try:
            assert trusts_environment(kube)
        finally:
            await kube.close()

    run(scenario)


def test_a_shared_client_is_left_as_its_owner_made_it(bare: Path) -> None:
    """KubeSpawner's client, shared with FracHub's spawner, is not FracHub's to change."""

    async def scenario() -> None:
        shared = client.ApiClient(client.Configuration())
        try:
            Kube(api_client=shared)
            assert shared.rest_client.pool_manager._trust_env
        finally:
            await shared.close()

    run(scenario)
