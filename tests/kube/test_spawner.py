"""FracKubeSpawner's pod placement, with the real KubeSpawner building the pod and its real
client creating it on the fake API server: node selection, the environment contract with the
GPU's UUID, GPU resources per sharing mode, the priority class."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from scheduler.backends.kubernetes import objects as o
from spawner.kube import FracKubeSpawner

from .conftest import Cluster, eventually, run


def allocation(share: float, gpus: tuple[int, ...] = (1,)) -> dict[str, Any]:
    return {
        "id": 41,
        "state": "running",
        "project": "vision",
        "placement": [
            {
                "node": "node-a",
                "gpus": [
                    {
                        "index": i,
                        "uuid": f"GPU-from-inventory-{i}",
                        "share": share,
                        "memory_mib": 81920,
                    }
                    for i in gpus
                ],
            }
        ],
    }


def make_spawner(cluster: Cluster, alloc: dict[str, Any], **traits: Any) -> FracKubeSpawner:
    fake = cluster.require_fake("builds a spawner against the fake server")
    spawner = FracKubeSpawner(
        _mock=True,
        k8s_api_host=fake.url,
        namespace=cluster.namespace,
        frachub_priority_class="frachub-interactive",
        frachub_api_url="http://127.0.0.1:1/services/frachub/api/v1/",
        frachub_api_token="unused",
        frachub_pytorch_hook=False,
        **traits,
    )
    spawner.allocation_id = alloc["id"]
    spawner.allocation = alloc
    return spawner


async def create(spawner: FracKubeSpawner) -> dict[str, Any]:
    manifest = await spawner.get_pod_manifest()
    body = ApiClient().sanitize_for_serialization(manifest)
    await spawner.api.create_namespaced_pod(spawner.namespace, body)
    return body


def test_fractional_notebook_is_placed_on_the_reserved_gpu(
    cluster: Cluster, kube_default: None, backend: Any
) -> None:
    async def scenario() -> None:
        scheduler = await backend()  # writes the UUID the reservation pod prints onto it
        try:
            await place(scheduler)
        finally:
            await scheduler.close()

    async def place(scheduler: Any) -> None:
        spawner = make_spawner(cluster, allocation(0.25))
        body = await create(spawner)
        spec = body["spec"]
        assert spec["nodeSelector"] == {o.HOSTNAME: "node-a"}
        assert spec["priorityClassName"] == "frachub-interactive"
        container = spec["containers"][0]
        assert o.GPU not in ((container.get("resources") or {}).get("limits") or {})
        env = {e["name"]: e.get("value") for e in container["env"]}
        reservation = cluster.pods(f"{o.COMPONENT}={o.RESERVATION}")[0]
        uuid = reservation["metadata"]["annotations"][o.GPU_UUID]
        assert reservation["metadata"]["name"] == "frachub-gpu-node-a-1"
        assert env["NVIDIA_VISIBLE_DEVICES"] == uuid and uuid.startswith("GPU-node-a-")
        assert env["FRACHUB_GPU_FRACTION"] == "0.25" and env["FRACHUB_GPU_MEMORY_MIB"] == "20480"
        assert "CUDA_VISIBLE_DEVICES" not in env
        labels = body["metadata"]["labels"]
        assert labels[o.TRACKED] == "true" and labels[o.WORKLOAD] == "41"
        assert body["metadata"]["annotations"][o.SHARES] == "node-a:1:250"

        def running() -> bool:
            pod = cluster.fake.get("pods", cluster.namespace, spawner.pod_name)  # type: ignore[union-attr]
            return (
                bool(pod)
                and pod["status"]["phase"] == "Running"
                and pod["spec"]["nodeName"] == "node-a"
            )

        await eventually(running, what="the notebook pod running on node-a")

    run(scenario)


@pytest.mark.parametrize(
    "mode, share, gpus, limits",
    [
        ("hami", 0.5, (1,), {o.GPU: "1", o.GPUMEM: "40960"}),
        ("reservation", 1.0, (0, 1), {o.GPU: "2"}),
        ("hami", 1.0, (2,), {o.GPU: "1"}),
    ],
    ids=["hami-fraction", "reservation-whole", "hami-whole"],
)
def test_gpu_resources_per_sharing_mode(
    cluster: Cluster,
    kube_default: None,
    mode: str,
    share: float,
    gpus: tuple[int, ...],
    limits: dict[str, str],
) -> None:
    async def scenario() -> None:
        spawner = make_spawner(cluster, allocation(share, gpus), frachub_sharing_mode=mode)
        body = await create(spawner)
        container = body["spec"]["containers"][0]
        got = (container.get("resources") or {}).get("limits") or {}
        assert {k: v for k, v in got.items() if k.startswith("nvidia.com/")} == limits
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert "NVIDIA_VISIBLE_DEVICES" not in env  # the device plugin or HAMi sets it
        assert cluster.pods(f"{o.COMPONENT}={o.RESERVATION}") == []

    run(scenario)


def test_cpu_only_notebook_sees_no_gpu(cluster: Cluster, kube_default: None) -> None:
    async def scenario() -> None:
        spawner = make_spawner(cluster, allocation(0.5))
        spawner.allocation_id = None
        spawner.allocation = None
        body = await create(spawner)
        container = body["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["NVIDIA_VISIBLE_DEVICES"] == "none"
        assert o.HOSTNAME not in (body["spec"].get("nodeSelector") or {})

    run(scenario)
