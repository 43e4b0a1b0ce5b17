"""The fake API server's volumes, as a real cluster treats them, through the real
kubernetes_asyncio client: a pod whose claim does not exist is not scheduled, and a pod
needing a ReadWriteOnce volume attached to another node waits in ContainerCreating with the
attach/detach controller's Multi-Attach error until that node's pods let it go. (The
backend's reactions are in test_backend.py.)"""

from __future__ import annotations

from typing import Any

from scheduler.backends.kubernetes.client import Kube, load_configuration

from .conftest import Cluster, eventually, run
from .fakeapi import FakeKube


def pod_on(name: str, node: str, claim: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "volumeMounts": [{"name": "home", "mountPath": "/home/jovyan"}],
                }
            ],
            "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }


def claim(fake: FakeKube, name: str, mode: str) -> None:
    body = {"metadata": {"name": name}, "spec": {"accessModes": [mode]}}
    fake.call(fake._create, "persistentvolumeclaims", "default", body)


def phase(fake: FakeKube, name: str) -> str:
    return ((fake.get("pods", "default", name) or {}).get("status") or {}).get("phase", "")


def events(fake: FakeKube, name: str, reason: str) -> list[str]:
    return [
        e["message"]
        for e in fake.objects("events", "default")
        if e["involvedObject"]["name"] == name and e["reason"] == reason
    ]


def test_a_readwriteonce_volume_attached_elsewhere_is_a_multi_attach_error(
    cluster: Cluster,
) -> None:
    fake = cluster.require_fake("inspects the attach/detach controller")
    claim(fake, "home-rwo", "ReadWriteOnce")
    claim(fake, "home-rwx", "ReadWriteMany")

    async def scenario() -> None:
        kube = Kube(await load_configuration(cluster.kubeconfig), retries=0)
        try:
            for name, node, volume in (
                ("notebook", "node-a", "home-rwo"),
                ("rwx-a", "node-a", "home-rwx"),
                ("rwx-b", "node-b", "home-rwx"),
                ("same-node", "node-a", "home-rwo"),
            ):
                body = pod_on(name, node, volume)
                await kube.call(kube.core.create_namespaced_pod, "default", body)
                await eventually(lambda n=name: phase(fake, n) == "Running", what=f"{name} runs")
            body = pod_on("job", "node-b", "home-rwo")
            await kube.call(kube.core.create_namespaced_pod, "default", body)
            await eventually(lambda: events(fake, "job", "FailedAttachVolume"), what="the error")
            job = fake.get("pods", "default", "job") or {}
            assert (job["spec"]["nodeName"], job["status"]["phase"]) == ("node-b", "Pending")
            (status,) = job["status"]["containerStatuses"]
            assert status["state"] == {"waiting": {"reason": "ContainerCreating"}}
            volume = (fake.get("persistentvolumeclaims", "default", "home-rwo") or {})["spec"][
                "volumeName"
            ]
            assert events(fake, "job", "FailedAttachVolume") == [
                f'Multi-Attach error for volume "{volume}" Volume is already used by pod(s) '
                "notebook, same-node"
            ]
            for holder in ("notebook", "same-node"):  # node-a lets the volume go
                fake.finish_pod("default", holder, 0)
            await eventually(lambda: phase(fake, "job") == "Running", what="the job runs")
        finally:
            await kube.close()

    run(scenario)


def test_a_pod_whose_claim_does_not_exist_is_not_scheduled(cluster: Cluster) -> None:
    fake = cluster.require_fake("inspects the scheduler")

    async def scenario() -> None:
        kube = Kube(await load_configuration(cluster.kubeconfig), retries=0)
        try:
            body = pod_on("early", "node-a", "claim-later")
            await kube.call(kube.core.create_namespaced_pod, "default", body)
            await eventually(lambda: events(fake, "early", "FailedScheduling"), what="refusal")
            assert events(fake, "early", "FailedScheduling") == [
                '0/N nodes are available: persistentvolumeclaim "claim-later" not found'
            ]
            assert "nodeName" not in (fake.get("pods", "default", "early") or {})["spec"]
            claim(fake, "claim-later", "ReadWriteOnce")
            await eventually(lambda: phase(fake, "early") == "Running", what="it runs")
        finally:
            await kube.close()

    run(scenario)
