"""Fixtures for the Kubernetes tests: a cluster to talk to through the real client.

    cluster     a ``Cluster``: the in-process fake API server (tests/kube/fakeapi.py) with
                nodes node-a (4 x A100 80GB) and node-b (2 x A100 40GB); or, with
                FRACHUB_KUBE_REAL=1 and KUBECONFIG set, the real cluster KUBECONFIG points at
                (namespace $FRACHUB_KUBE_NAMESPACE, default "frachub-test", which must exist)
    backend     backend(**traits) -> a connected KubernetesBackend on that cluster
    hub         a real JupyterHub for the module (the tests that run ``frachub service``)

Tests name their nodes ``cluster.node(0)``, ``cluster.node(1)``: the GPU nodes of
$FRACHUB_KUBE_NODES ("name:gpus:memory_mib,..."), else on a real cluster the GPU nodes its
inventory reads (GPU feature discovery's labels and allocatable ``nvidia.com/gpu``), else the
fake's. ``FRACHUB_KUBE_NODES=node-b:2:40960`` runs the fake through that same path (the
tests needing a second node then skip). ``cluster.pods()``/``cluster.jobs()`` read through
the API server, as a real cluster is read.

Every test here is marked ``kubernetes``. The fake run never skips; on a real cluster, steps
that only the fake can perform (finishing a pod with a chosen code, injecting API errors,
compacting the watch history) skip the test with a message saying so, and so does a test
needing more GPU nodes or GPUs than the cluster has.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hubharness import Hub, running_hub

from scheduler.backends.kubernetes import KubernetesBackend
from scheduler.backends.kubernetes.client import Kube, load_configuration
from scheduler.backends.kubernetes.labels import COMPONENT, MANAGED_SELECTOR, RESERVATION
from scheduler.backends.kubernetes.reservation import UUID_LINE

from .fakeapi import FakeKube

HERE = Path(__file__).resolve().parent
REAL = os.environ.get("FRACHUB_KUBE_REAL") == "1" and bool(os.environ.get("KUBECONFIG"))
NODES_ENV = "FRACHUB_KUBE_NODES"
FAKE_NODES = (("node-a", 4, 81920), ("node-b", 2, 40960))
"""The fake's GPU nodes: (name, GPUs, memory MiB per GPU)."""


def nodes_from_env(text: str) -> tuple[tuple[str, int, int], ...]:
    """``FRACHUB_KUBE_NODES``: "name:gpus:memory_mib,..." (a mistyped entry fails loudly)."""
    nodes = []
    for entry in filter(None, (part.strip() for part in text.split(","))):
        try:
            name, gpus, memory = entry.split(":")
            nodes.append((name, int(gpus), int(memory)))
        except ValueError:
            raise pytest.UsageError(f"{NODES_ENV}: {entry!r} is not name:gpus:memory_mib") from None
    return tuple(nodes)


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
    if labels.get(COMPONENT) == RESERVATION and devices:
        fake.write_log(
            pod["metadata"]["namespace"], pod["metadata"]["name"], f"{UUID_LINE}{devices[0]}"
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
    """The fake (``fake`` set) or a real cluster (``fake`` None), and the GPU nodes the tests
    place work on (``nodes``: name, GPUs, memory MiB per GPU)."""

    def __init__(
        self,
        kubeconfig: str,
        namespace: str,
        fake: FakeKube | None,
        nodes: tuple[tuple[str, int, int], ...] = FAKE_NODES,
    ) -> None:
        self.kubeconfig, self.namespace, self.fake = kubeconfig, namespace, fake
        self.nodes = nodes

    def require_fake(self, why: str) -> FakeKube:
        if self.fake is None:
            pytest.skip(f"fake-only step on a real cluster: {why}")
        return self.fake

    def node(self, index: int, gpus: int = 1) -> str:
        """The name of the ``index``-th GPU node (0-based) with at least ``gpus`` GPUs; skips
        the test, saying what it needs, when the cluster has no such node."""
        fitting = [name for name, count, _ in self.nodes if count >= gpus]
        if index >= len(fitting):
            have = ", ".join(f"{n}:{g}" for n, g, _ in self.nodes) or "none"
            pytest.skip(
                f"needs {index + 1} GPU node(s) with >= {gpus} GPU(s); the cluster's GPU nodes "
                f"are {have} ({NODES_ENV} or the nodes' labels and nvidia.com/gpu)"
            )
        return fitting[index]

    def pods(self, labels: str = "") -> list[dict[str, Any]]:
        """The namespace's pods matching ``labels``, read through the API server."""
        return self._list("pods", labels)

    def jobs(self, labels: str = "") -> list[dict[str, Any]]:
        """The namespace's Jobs matching ``labels``, read through the API server."""
        return self._list("jobs", labels)

    def services(self, labels: str = "") -> list[dict[str, Any]]:
        """The namespace's Services matching ``labels``, read through the API server."""
        return self._list("services", labels)

    def finish(self, pod: dict[str, Any], code: int) -> None:
        """End ``pod``'s process with ``code``: the fake's kubelet does it now; on a real
        cluster the test's command ends by itself (``ends(code)``)."""
        if self.fake is not None:
            self.fake.finish_pod(self.namespace, pod["metadata"]["name"], code)

    def ends(self, code: int, seconds: int = 5) -> str:
        """A job command that runs ``seconds`` and exits with ``code`` on a real cluster (the
        fake runs no command: ``finish`` ends it)."""
        return f"sleep {seconds}; exit {code}"

    def ignoring_sigterm(self) -> str:
        """A job command whose process ignores SIGTERM (only SIGKILL ends it): the fake's
        kubelet is told so; on a real node the shell ignores it."""
        if self.fake is not None:
            self.fake.ignore_sigterm = True
        return "trap '' TERM; sleep 600"

    @property
    def patience(self) -> float:
        """Seconds to wait for a pod to run: a real node may pull the image first."""
        return 10.0 if self.fake is not None else 120.0

    def _list(self, plural: str, labels: str) -> list[dict[str, Any]]:
        # called from inside a test's event loop, in sync checks: a loop of its own in a thread
        async def read() -> list[dict[str, Any]]:
            kube = Kube(await load_configuration(self.kubeconfig), retries=2)
            try:
                list_ = {
                    "pods": kube.core.list_namespaced_pod,
                    "jobs": kube.batch.list_namespaced_job,
                    "services": kube.core.list_namespaced_service,
                }[plural]
                found = await kube.call(list_, self.namespace, label_selector=labels)
                return sorted(found.get("items") or [], key=lambda i: i["metadata"]["name"])
            finally:
                await kube.close()

        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, read()).result()

    def clean(self) -> None:
        """Delete what FracHub created in the namespace and wait until it is gone (a real
        cluster outlives a test; the names a test uses must be free for the next)."""

        async def clean() -> None:
            kube = Kube(await load_configuration(self.kubeconfig), retries=2)
            selector = MANAGED_SELECTOR
            try:
                for delete in (
                    kube.batch.delete_collection_namespaced_job,
                    kube.core.delete_collection_namespaced_pod,
                ):
                    await kube.call(
                        delete,
                        self.namespace,
                        label_selector=selector,
                        propagation_policy="Background",
                        grace_period_seconds=1,
                    )
                services = await kube.call(
                    kube.core.list_namespaced_service, self.namespace, label_selector=selector
                )
                for service in services.get("items") or []:
                    await kube.call(
                        kube.core.delete_namespaced_service,
                        service["metadata"]["name"],
                        self.namespace,
                    )
                for _ in range(120):
                    pods = await kube.call(
                        kube.core.list_namespaced_pod, self.namespace, label_selector=selector
                    )
                    jobs = await kube.call(
                        kube.batch.list_namespaced_job, self.namespace, label_selector=selector
                    )
                    if not pods.get("items") and not jobs.get("items"):
                        return
                    await asyncio.sleep(0.5)
                raise AssertionError(f"FracHub's pods in {self.namespace} did not go in 60 s")
            finally:
                await kube.close()

        asyncio.run(clean())


def real_nodes(kubeconfig: str, namespace: str) -> tuple[tuple[str, int, int], ...]:
    """The real cluster's GPU nodes as the backend's inventory reads them."""
    if os.environ.get(NODES_ENV):
        return nodes_from_env(os.environ[NODES_ENV])

    async def read() -> tuple[tuple[str, int, int], ...]:
        backend = backend_for(Cluster(kubeconfig, namespace, None, ()))
        await backend.connect()
        try:
            return tuple((n.name, n.gpus, n.gpu_memory_mib) for n in backend.inventory().nodes)
        finally:
            await backend.close()

    return asyncio.run(read())


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """One real JupyterHub (and proxy) per module, for the tests that run ``frachub service``."""
    with running_hub(tmp_path_factory.mktemp("hub")) as running:
        yield running


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    if REAL:
        kubeconfig = os.environ["KUBECONFIG"]
        namespace = os.environ.get("FRACHUB_KUBE_NAMESPACE", "frachub-test")
        real = Cluster(kubeconfig, namespace, None, real_nodes(kubeconfig, namespace))
        real.clean()
        try:
            yield real
        finally:
            real.clean()
        return
    with started_fake() as fake:
        fake.add_node("node-a", gpus=4, memory_mib=81920)
        fake.add_node("node-b", gpus=2, memory_mib=40960, product="NVIDIA-A100-PCIE-40GB")
        nodes = nodes_from_env(os.environ.get(NODES_ENV, "")) or FAKE_NODES
        yield Cluster(fake.kubeconfig(str(tmp_path / "kubeconfig")), "default", fake, nodes)


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


def unschedulable(pod: dict[str, Any] | None) -> bool:
    """Whether the scheduler has tried ``pod`` and found no node for it (its PodScheduled
    condition says Unschedulable): the event after which a pod that stays Pending is known
    not to have been placed, on the fake as on a real cluster."""
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return any(
        c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions
    )


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
