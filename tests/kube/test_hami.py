"""HAMi mode as HAMi reads pods: the GPUs from HAMi's node registration (not the virtual
``nvidia.com/gpu`` slots), every GPU pod on HAMi's scheduler with ``nvidia.com/use-gpuuuid``
naming the GPUs FracHub chose, and the resources HAMi's rules give the meaning FracHub means
(a share's ``nvidia.com/gpumem`` rounded down, a whole GPU's 100 % memory and cores).

HAMi's webhook, scheduler extender and device plugin are not here (the fake's scheduler
ignores ``schedulerName`` and hands out whole devices): these tests check what the backend
writes, against HAMi's rules as its source states them (pkg/scheduler/webhook.go,
pkg/device/nvidia/device.go)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scheduler.backends.base import BackendError
from scheduler.backends.kubernetes.gpus import (
    GPU,
    GPUCORES,
    GPUMEM,
    GPUMEM_PERCENTAGE,
    HAMI_REGISTER,
    HAMI_SCHEDULER,
    HAMI_USE_UUID,
)
from scheduler.backends.kubernetes.inventory import HamiDevice, hami_devices
from scheduler.backends.kubernetes.labels import COMPONENT, RESERVATION, WORKLOAD

from .conftest import Cluster, connected, eventually, run
from .fakeapi import FakeKube
from .test_backend import env_of, limits_of, make_job, pods_of
from .test_chart_on_cluster import backend_section, chart_backend, render
from .test_spawner import allocation, create, make_spawner

HAMI_MEMORY = 81559  # what HAMi's device plugin registers for an 80 GB A100 (NVML's total)


def register(
    fake: FakeKube, node: str, gpus: int, memory: int = HAMI_MEMORY, *, legacy: bool = False
) -> list[str]:
    """What HAMi's device plugin writes on a node: its GPUs (the fake's device UUIDs), each
    split into 10 slots; allocatable nvidia.com/gpu becomes the slots' count."""
    uuids = [f"GPU-{node}-{i}" for i in range(gpus)]
    if legacy:  # HAMi < 2.5: id,count,devmem,devcore,type,numa,health,index,mode per device
        text = "".join(
            f"{u},10,{memory},100,NVIDIA-A100-SXM4-80GB,0,true,{i},hami-core:"
            for i, u in enumerate(uuids)
        )
    else:
        text = json.dumps(
            [
                {
                    "id": u,
                    "index": i,
                    "count": 10,
                    "devmem": memory,
                    "devcore": 100,
                    "type": "NVIDIA-A100-SXM4-80GB",
                    "numa": 0,
                    "mode": "hami-core",
                    "health": True,
                }
                for i, u in enumerate(uuids)
            ]
        )
    fake.patch_object("nodes", "", node, {"metadata": {"annotations": {HAMI_REGISTER: text}}})
    return uuids


def node_with(gpus: list[dict[str, Any]]) -> dict[str, Any]:
    return {"metadata": {"name": "n", "annotations": {HAMI_REGISTER: json.dumps(gpus)}}}


def test_hamis_registration_is_read_in_both_formats() -> None:
    device = {"id": "GPU-b", "index": 1, "devmem": 100, "type": "T4", "health": True}
    unordered = node_with([device, {**device, "id": "GPU-a", "index": 0, "health": False}])
    # in index order; an unhealthy device stays, so no index shifts under running work
    assert [d.uuid for d in hami_devices(unordered)] == ["GPU-a", "GPU-b"]
    legacy = {"metadata": {"annotations": {HAMI_REGISTER: "GPU-x,10,15360,100,T4,0,true:"}}}
    assert hami_devices(legacy) == [HamiDevice("GPU-x", 15360, "T4")]
    for broken in ("GPU-x,10,15360:", "[{}]", '[{"id": "not-a-uuid"}]', "{", ""):
        node = {"metadata": {"annotations": {HAMI_REGISTER: broken}}}
        assert hami_devices(node) == [], broken


def test_hami_inventory_is_the_registered_gpus_not_the_slots(
    cluster: Cluster, backend: Any
) -> None:
    fake = cluster.require_fake("writes HAMi's registration")
    uuids = register(fake, "node-a", 4)
    register(fake, "node-b", 2, 40326, legacy=True)
    fake.add_node("node-c", gpus=40, gfd=False)  # HAMi's 10 slots per GPU, not registered yet

    async def scenario() -> None:
        made = await backend(sharing_mode="hami")
        try:
            inventory = made.inventory()
            nodes = {node.name: node for node in inventory.nodes}
            assert sorted(nodes) == ["node-a", "node-b"]  # node-c: HAMi cannot place there
            assert (nodes["node-a"].gpus, nodes["node-a"].gpu_memory_mib) == (4, HAMI_MEMORY)
            assert (nodes["node-b"].gpus, nodes["node-b"].gpu_memory_mib) == (2, 40326)
            assert [inventory.uuid("node-a", i) for i in range(4)] == uuids
            register(fake, "node-c", 4)
            await eventually(
                lambda: {n.name: n.gpus for n in made.inventory().nodes}.get("node-c") == 4,
                what="node-c counted by its 4 registered GPUs, not its 40 slots",
            )
        finally:
            await made.close()

    run(scenario)


def test_a_hami_share_is_pinned_to_the_chosen_gpu_on_hamis_scheduler(
    cluster: Cluster, backend: Any
) -> None:
    fake = cluster.require_fake("writes HAMi's registration")
    uuids = register(fake, "node-a", 4)

    async def scenario() -> None:
        made = await backend(sharing_mode="hami", scheduler_name="ignored-for-gpu-pods")
        try:
            for workload_id in (2, 3):  # two halves of GPU 1
                # the backend sizes each share from the memory HAMi registered
                await made.start(make_job(workload_id, [("node-a", [1], 0.5)]))
            pods = [(await pods_of(cluster, w))[0] for w in (2, 3)]
            for pod in pods:
                # rounded down from HAMi's count: 2 x 40779 fits in 81559, 2 x 40780 would not
                assert limits_of(pod) == {GPU: "1", GPUMEM: "40779"}
                assert pod["spec"]["schedulerName"] == HAMI_SCHEDULER
                assert pod["metadata"]["annotations"][HAMI_USE_UUID] == uuids[1]
                env = env_of(pod)
                assert env["FRACHUB_GPU_MEMORY_MIB"] == "40779"
                assert env["FRACHUB_GPU_FRACTION"] == "0.5"
                # HAMi shows the share as the GPU's whole memory: JAX takes all of it
                assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "1"
                assert env["FRACHUB_GPU_UUIDS"] == uuids[1]
                assert "NVIDIA_VISIBLE_DEVICES" not in env  # HAMi's device plugin sets it
            assert cluster.pods(f"{COMPONENT}={RESERVATION}") == []
        finally:
            await made.close()

    run(scenario)


def test_hami_whole_gpus_are_exclusive_and_pinned_per_group(cluster: Cluster, backend: Any) -> None:
    fake = cluster.require_fake("writes HAMi's registration")
    fake.hami_scheduler_name = "vgpu-scheduler"  # the fake schedules only for a running one
    uuids = register(fake, "node-a", 4)

    async def scenario() -> None:
        made = await backend(sharing_mode="hami", hami_scheduler_name="vgpu-scheduler")
        try:
            await made.start(make_job(5, [("node-a", [3], 1.0), ("node-a", [0], 1.0)]))
            (job,) = cluster.jobs(f"{WORKLOAD}=5")
            template = job["spec"]["template"]
            # one template for both pods: HAMi gives each a free one of the two
            assert template["metadata"]["annotations"][HAMI_USE_UUID] == (f"{uuids[3]},{uuids[0]}")
            assert template["spec"]["schedulerName"] == "vgpu-scheduler"
            for pod in await pods_of(cluster, 5, 2):
                assert limits_of(pod) == {GPU: "1", GPUMEM_PERCENTAGE: "100", GPUCORES: "100"}
                assert "FRACHUB_GPU_UUIDS" not in env_of(pod)  # which of the two: HAMi's pick
            await made.start(make_job(6, [("node-a", [1, 2], 1.0)]))
            (pod,) = await pods_of(cluster, 6)
            assert pod["metadata"]["annotations"][HAMI_USE_UUID] == f"{uuids[1]},{uuids[2]}"
            assert limits_of(pod)[GPU] == "2"
        finally:
            await made.close()

    run(scenario)


def test_hami_pods_without_a_gpu_keep_the_configured_scheduler(
    cluster: Cluster, backend: Any
) -> None:
    node = cluster.node(0)

    async def scenario() -> None:
        made = await backend(sharing_mode="hami", scheduler_name="batch-scheduler")
        try:
            await made.start(make_job(7, [(node, [], 0.0)]))
            (job,) = cluster.jobs(f"{WORKLOAD}=7")
            template = job["spec"]["template"]
            assert template["spec"]["schedulerName"] == "batch-scheduler"
            assert HAMI_USE_UUID not in template["metadata"]["annotations"]
            assert limits_of(template) == {}
        finally:
            await made.close()

    run(scenario)


def test_a_gpu_hami_has_not_registered_is_refused_with_nothing_created(
    cluster: Cluster, backend: Any
) -> None:
    node = cluster.node(0)  # a node HAMi has not registered: the fake's, or one without HAMi

    async def scenario() -> None:
        made = await backend(sharing_mode="hami")
        try:
            with pytest.raises(BackendError, match=f"HAMi has not registered GPU 0 on {node}"):
                await made.start(make_job(8, [(node, [0], 0.25)]))
            assert cluster.jobs(f"{WORKLOAD}=8") == []
        finally:
            await made.close()

    run(scenario)


def test_the_charts_hami_settings_reach_the_pods(
    cluster: Cluster, tmp_path: Path, kube_default: None
) -> None:
    """helm/frachub with ``sharing: hami`` and HAMi's scheduler under another name: the
    scheduler (the chart's config and RBAC) and a notebook (FracKubeSpawner) both put their
    GPU pods on it, with the GPUs HAMi registered."""
    fake = cluster.require_fake("grants RBAC per token")
    fake.hami_scheduler_name = "vgpu-scheduler"
    uuids = register(fake, "node-a", 4)
    values = {
        "sharing": "hami",
        "kubernetes": {"namespace": cluster.namespace, "hamiSchedulerName": "vgpu-scheduler"},
    }
    documents = render(values)
    assert backend_section(documents)["hami_scheduler_name"] == "vgpu-scheduler"

    async def scenario() -> None:
        async with connected(chart_backend(cluster, documents, tmp_path)) as made:
            assert made.inventory().uuid("node-a", 2) == uuids[2]
            await made.start(make_job(9, [("node-a", [2], 0.5)]))
            (pod,) = await pods_of(cluster, 9)
            assert pod["spec"]["schedulerName"] == "vgpu-scheduler"
            assert pod["metadata"]["annotations"][HAMI_USE_UUID] == uuids[2]
        alloc = allocation(0.5, (2,))
        alloc["placement"][0]["gpus"][0]["uuid"] = uuids[2]
        spawner = make_spawner(
            cluster,
            alloc,
            frachub_sharing_mode="hami",
            frachub_hami_scheduler_name="vgpu-scheduler",
        )
        body = await create(spawner)
        assert body["spec"]["schedulerName"] == "vgpu-scheduler"
        assert body["metadata"]["annotations"][HAMI_USE_UUID] == uuids[2]

    run(scenario)
