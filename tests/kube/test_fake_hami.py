"""HAMi in the fake API server, as on a cluster running HAMi, through the real
kubernetes_asyncio client: its scheduler gives each pod its memory share of a GPU (spread,
within the GPU's memory and split count, on the GPUs ``nvidia.com/use-gpuuuid`` names) and
writes the decision its device plugin reads; a share that fits nowhere leaves the pod
unschedulable; the device plugin serves no pod another scheduler placed; a pod naming a
scheduler that does not run waits unscheduled. (The backend's side: test_backend.py.)"""

from __future__ import annotations

from typing import Any

from scheduler.backends.kubernetes.client import Kube, load_configuration

from .conftest import Cluster, eventually, run
from .fakeapi import HAMI_REGISTER, HAMI_USE_UUID, FakeKube, hami_allocation


def gpu_pod(name: str, memory: int | None, scheduler: str = "hami-scheduler", **annotations: str):
    limits = {"nvidia.com/gpu": "1"}
    if memory is not None:
        limits["nvidia.com/gpumem"] = str(memory)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": {"kubernetes.io/hostname": "node-h"},
            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}],
        },
    }


def pod(fake: FakeKube, name: str) -> dict[str, Any]:
    return fake.get("pods", "default", name) or {}


def test_hami_gives_each_pod_its_memory_share_of_a_gpu(cluster: Cluster) -> None:
    fake = cluster.require_fake("runs HAMi")
    fake.add_node("node-h", gpus=2, memory_mib=40960, hami=True)
    started: dict[str, list[str]] = {}
    fake.on_running.append(lambda _, p, devices: started.update({p["metadata"]["name"]: devices}))

    async def scenario() -> None:
        kube = Kube(await load_configuration(cluster.kubeconfig), retries=0)
        try:
            gpu0, gpu1 = "GPU-node-h-0", "GPU-node-h-1"
            wanted = [
                ("first", 30000, {}, gpu0),  # spread: the least used GPU first
                ("second", 20000, {}, gpu1),
                ("third", 15000, {}, gpu1),  # 20000 used on GPU 1, 30000 on GPU 0
                ("pinned", 10000, {HAMI_USE_UUID: gpu0}, gpu0),  # fills GPU 0 to 40000
            ]
            for name, memory, annotations, device in wanted:
                body = gpu_pod(name, memory, **annotations)
                await kube.call(kube.core.create_namespaced_pod, "default", body)
                await eventually(lambda n=name: n in started, what=f"{name} runs")
                assert hami_allocation(pod(fake, name)) == [(device, memory, 0)], name
                assert started[name] == [device]
            body = gpu_pod("too-big", 20000)  # 960 MiB left on GPU 0, 5960 on GPU 1
            await kube.call(kube.core.create_namespaced_pod, "default", body)
            await eventually(lambda: pod(fake, "too-big")["status"].get("conditions"))
            (condition,) = pod(fake, "too-big")["status"]["conditions"]
            assert condition["reason"] == "Unschedulable"
            assert "node node-h: CardInsufficientMemory" in condition["message"]
            fake.finish_pod("default", "second", 0)  # its 20000 MiB on GPU 1 are free again
            await eventually(lambda: "too-big" in started, what="too-big runs")
            assert hami_allocation(pod(fake, "too-big")) == [(gpu1, 20000, 0)]
        finally:
            await kube.close()

    run(scenario)


def test_hami_serves_only_the_pods_its_scheduler_placed(cluster: Cluster) -> None:
    fake = cluster.require_fake("runs HAMi")
    fake.add_node("node-h", gpus=2, memory_mib=40960, hami=True)

    async def scenario() -> None:
        kube = Kube(await load_configuration(cluster.kubeconfig), retries=0)
        try:
            body = gpu_pod("default-placed", 20000, scheduler="default-scheduler")
            await kube.call(kube.core.create_namespaced_pod, "default", body)
            await eventually(lambda: pod(fake, "default-placed")["status"]["phase"] == "Failed")
            status = pod(fake, "default-placed")["status"]
            assert status["reason"] == "UnexpectedAdmissionError"
            assert status["message"] == "no binding pod found on node node-h"
            body = gpu_pod("nobody-serves", 20000, scheduler="not-installed")
            await kube.call(kube.core.create_namespaced_pod, "default", body)
            body = gpu_pod("whole", None)  # no gpumem: the whole GPU's memory
            await kube.call(kube.core.create_namespaced_pod, "default", body)
            await eventually(lambda: pod(fake, "whole")["status"]["phase"] == "Running")
            assert hami_allocation(pod(fake, "whole")) == [("GPU-node-h-0", 40960, 0)]
            waiting = pod(fake, "nobody-serves")
            assert "nodeName" not in waiting["spec"] and "conditions" not in waiting["status"]
        finally:
            await kube.close()

    run(scenario)


def test_hami_before_2_5_registers_its_gpus_in_its_older_format(cluster: Cluster) -> None:
    fake = cluster.require_fake("runs HAMi")
    fake.add_node("node-h", gpus=2, memory_mib=40960, hami=True)
    legacy = "".join(
        f"GPU-node-h-{i},10,40960,100,NVIDIA-A100,0,true,{i},hami-core:" for i in (1, 0)
    )
    fake.patch_object("nodes", "", "node-h", {"metadata": {"annotations": {HAMI_REGISTER: legacy}}})

    async def scenario() -> None:
        kube = Kube(await load_configuration(cluster.kubeconfig), retries=0)
        try:
            body = gpu_pod("old", 30000, **{HAMI_USE_UUID: "GPU-node-h-1"})
            await kube.call(kube.core.create_namespaced_pod, "default", body)
            await eventually(lambda: pod(fake, "old")["status"]["phase"] == "Running")
            assert hami_allocation(pod(fake, "old")) == [("GPU-node-h-1", 30000, 0)]
        finally:
            await kube.close()

    run(scenario)
