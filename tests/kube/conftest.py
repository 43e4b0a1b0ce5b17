"""Fixtures for the Kubernetes tests: a cluster to talk to through the real client.

    cluster     a ``Cluster``: the in-process fake API server (tests/kube/fakeapi.py) with
                nodes node-a (4 x A100 80GB) and node-b (2 x A100 40GB); or, with
                FRACHUB_KUBE_REAL=1 and KUBECONFIG set, the real cluster KUBECONFIG points at
                (namespace $FRACHUB_KUBE_NAMESPACE, default "frachub-test", which must exist)
    backend     backend(**traits) -> a connected KubernetesBackend on that cluster
    hub         a real JupyterHub for the module (the tests that run ``frachub service``)

Every test here is marked ``kubernetes``. The fake run never skips; on a real cluster, steps
that only the fake can perform (finishing a pod with a chosen code, injecting API errors,
compacting the watch history) skip the test with a message saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hubharness import Hub, running_hub

from scheduler.backends.kubernetes import KubernetesBackend
from scheduler.backends.kubernetes import objects as o

from .fakeapi import FakeKube

HERE = Path(__file__).resolve().parent
REAL = os.environ.get("FRACHUB_KUBE_REAL") == "1" and bool(os.environ.get("KUBECONFIG"))


def pytest_configure(config: pytest.Config) -> None:
    # harmless once pyproject.toml registers the marker too
    config.addinivalue_line(
        "markers", "kubernetes: the Kubernetes backend and spawner against a (fake) API server"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.kubernetes)


def report_reserved_gpu(fake: FakeKube, pod: dict[str, Any], devices: list[str]) -> None:
    """What the reservation pod's program does on a real node (tests/kube/test_reservation.py
    runs the real one): print the UUID of the GPU the device plugin gave it. Nothing writes
    the annotation but the scheduler's backend, which reads this through pods/log."""
    labels = pod["metadata"].get("labels") or {}
    if labels.get(o.COMPONENT) == o.RESERVATION and devices:
        fake.write_log(
            pod["metadata"]["namespace"], pod["metadata"]["name"], f"{o.UUID_LINE}{devices[0]}"
        )


SERVICE_CONFIG = """
c.FracHubService.backend_class = "scheduler.backends.kubernetes.KubernetesBackend"
c.FracHubService.poll_interval = 0.1
c.FracHubService.idle_check_interval = 0  # allocations here have no server behind them
c.KubernetesBackend.kubeconfig = {kubeconfig!r}
c.KubernetesBackend.namespace = {namespace!r}
c.KubernetesBackend.image = "busybox:1.36"
c.KubernetesBackend.home_volumes = []
c.KubernetesBackend.home_volume_mounts = []
# leader election stays on, as deployed; short, so a restart after SIGKILL waits little
c.KubernetesBackend.lease_seconds = 3.0
c.KubernetesBackend.lease_renew_seconds = 0.5
c.KubernetesBackend.lease_retry_seconds = 0.2
"""
"""A ``frachub service`` subprocess on the Kubernetes backend (format with ``kubeconfig`` and
``namespace``); a test adds its queues and timings."""


@contextlib.contextmanager
def started_fake() -> Iterator[FakeKube]:
    """The fake API server, its reservation pods reporting their GPU as real ones do; the
    caller adds the nodes. Stopped on leaving."""
    fake = FakeKube().start()
    fake.on_running.append(report_reserved_gpu)
    try:
        yield fake
    finally:
        fake.stop()


class Cluster:
    """The fake (``fake`` set) or a real cluster (``fake`` None)."""

    def __init__(self, kubeconfig: str, namespace: str, fake: FakeKube | None) -> None:
        self.kubeconfig, self.namespace, self.fake = kubeconfig, namespace, fake

    def require_fake(self, why: str) -> FakeKube:
        if self.fake is None:
            pytest.skip(f"fake-only step on a real cluster: {why}")
        return self.fake

    def pods(self, labels: str = "") -> list[dict[str, Any]]:
        return self.require_fake("reading objects directly").objects("pods", self.namespace, labels)

    def jobs(self, labels: str = "") -> list[dict[str, Any]]:
        return self.require_fake("reading objects directly").objects("jobs", self.namespace, labels)


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """One real JupyterHub (and proxy) per module, for the tests that run ``frachub service``."""
    with running_hub(tmp_path_factory.mktemp("hub")) as running:
        yield running


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    if REAL:
        yield Cluster(
            os.environ["KUBECONFIG"], os.environ.get("FRACHUB_KUBE_NAMESPACE", "frachub-test"), None
        )
        return
    with started_fake() as fake:
        fake.add_node("node-a", gpus=4, memory_mib=81920)
        fake.add_node("node-b", gpus=2, memory_mib=40960, product="NVIDIA-A100-PCIE-40GB")
        yield Cluster(fake.kubeconfig(str(tmp_path / "kubeconfig")), "default", fake)


@pytest.fixture
def kube_default(monkeypatch: pytest.MonkeyPatch, cluster: Cluster) -> None:
    """KubeSpawner loads the default kubeconfig at construction (path read at import)."""
    from kubernetes_asyncio.config import kube_config

    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", cluster.kubeconfig)
    monkeypatch.setenv("KUBECONFIG", cluster.kubeconfig)


def backend_for(cluster: Cluster, **traits: Any) -> KubernetesBackend:
    settings: dict[str, Any] = {
        "kubeconfig": cluster.kubeconfig,
        "namespace": cluster.namespace,
        "leader_election": False,
        "exit_on_leadership_lost": False,
        "termination_grace_seconds": 2,
        "image": "busybox:1.36",
        "reservation_timeout": 10.0,
        "home_volumes": [],
        "home_volume_mounts": [],
    }
    settings.update(traits)
    return KubernetesBackend(**settings)


@pytest.fixture
def backend(cluster: Cluster) -> Callable[..., Awaitable[KubernetesBackend]]:
    async def make(**traits: Any) -> KubernetesBackend:
        made = backend_for(cluster, **traits)
        await made.connect()
        return made

    return make


@contextlib.asynccontextmanager
async def connected(backend: KubernetesBackend) -> AsyncIterator[KubernetesBackend]:
    """``backend`` connected for the block, closed after it."""
    await backend.connect()
    try:
        yield backend
    finally:
        await backend.close()


def run(scenario: Callable[[], Awaitable[Any]], timeout: float = 30.0) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(scenario(), timeout)

    return asyncio.run(bounded())


async def eventually(check: Callable[[], Any], timeout: float = 10.0, what: str = "") -> Any:
    """Wait until ``check()`` (sync or async) returns something truthy; return it."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        await asyncio.sleep(0.05)
