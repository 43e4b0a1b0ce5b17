"""The chart's scheduler and z2jh's hub as a real cluster would hold them: the chart's
rendered config loaded into ``KubernetesBackend``, each party with only what its Role grants
(the fake answers 403 to anything else, per service-account token), the reservation pod's
own program, tainted GPU nodes, and home claims that one node at a time may mount."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from jupyterhub.spawner import SpawnException
from kubernetes_asyncio.config import kube_config
from traitlets.config import Config

from scheduler.backends.base import BackendError, Exit
from scheduler.backends.kubernetes.backend import KubernetesBackend
from scheduler.backends.kubernetes.labels import (
    COMPONENT,
    GPU_UUID,
    HOSTNAME,
    RESERVATION,
    WORKLOAD,
)
from scheduler.backends.kubernetes.pods import pod_phase
from scheduler.backends.kubernetes.reservation import reported_uuid, reservation_manifest
from scheduler.backends.kubernetes.volumes import format_template, user_fields
from spawner.kube import FracKubeSpawner

from .conftest import Cluster, connected, eventually, run
from .fakeapi import Z2JH_HUB_RULES, FakeKube, rules_for_service_account
from .test_backend import exits_of, make_job, pods_of
from .test_spawner import allocation, create, make_spawner

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "frachub"
RELEASE_NAMESPACE = "jupyterhub"
SCHEDULER_TOKEN, HUB_TOKEN = "frachub-scheduler-token", "z2jh-hub-token"


def render(values: dict[str, Any], namespace: str = RELEASE_NAMESPACE) -> list[dict[str, Any]]:
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk: pip install .[test]")
    with helm.Chart.load(str(CHART)) as chart:
        rendered = chart.render(values, name="frachub", namespace=namespace, is_install=True)
    return [
        document
        for path, text in sorted(rendered.items())
        if not path.endswith("NOTES.txt")
        for document in yaml.safe_load_all(text)
        if document
    ]


def backend_section(documents: list[dict[str, Any]]) -> dict[str, Any]:
    (config_map,) = [d for d in documents if d["kind"] == "ConfigMap"]
    return json.loads(config_map["data"]["frachub_config.json"])["KubernetesBackend"]


def chart_backend(
    cluster: Cluster, documents: list[dict[str, Any]], tmp_path: Path, **traits: Any
) -> KubernetesBackend:
    """The scheduler as the chart deploys it: its config file, its service account's token."""
    fake = cluster.require_fake("grants RBAC per token")
    fake.grant(
        SCHEDULER_TOKEN,
        f"system:serviceaccount:{RELEASE_NAMESPACE}:frachub",
        rules_for_service_account(documents, RELEASE_NAMESPACE, "frachub"),
    )
    settings: dict[str, Any] = {
        "kubeconfig": fake.kubeconfig(
            str(tmp_path / "scheduler.kubeconfig"), token=SCHEDULER_TOKEN
        ),
        "identity": "scheduler-0",
        "exit_on_leadership_lost": False,
        "termination_grace_seconds": 2,
        "reservation_timeout": 10.0,
        "home_volumes": [],
        "home_volume_mounts": [],
    }
    settings.update(traits)
    return KubernetesBackend(
        config=Config({"KubernetesBackend": backend_section(documents)}), **settings
    )


# --- 1. the chart's settings reach the backend --------------------------------------------------


def test_the_charts_settings_reach_the_backend() -> None:
    values = {
        "sharing": "hami",
        "kubernetes": {
            "namespace": "gpu-work",
            "jobImage": "registry.example/train:1",
            "homeVolume": {"name": "home", "persistentVolumeClaim": {"claimName": "home-nfs"}},
            "homeMountPath": "/home/user",
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "runtimeClassName": "nvidia",
        },
    }
    section = backend_section(render(values))
    unknown = set(section) - set(KubernetesBackend.class_trait_names(config=True))
    assert not unknown, f"the chart writes settings the backend does not have: {unknown}"
    backend = KubernetesBackend(config=Config({"KubernetesBackend": section}))
    assert backend.sharing_mode == "hami"
    assert backend.image == "registry.example/train:1"
    assert backend.namespace == "gpu-work" and backend.lease_namespace == RELEASE_NAMESPACE
    assert backend.home_volumes == [values["kubernetes"]["homeVolume"]]
    assert backend.home_volume_mounts == [{"name": "home", "mountPath": "/home/user"}]
    assert backend.home_mount_path == "/home/user"
    assert backend.priority_class == "frachub-training"
    assert backend.reservation_priority_class == "frachub-notebook"
    assert backend.tolerations == values["kubernetes"]["tolerations"]
    assert backend.runtime_class_name == "nvidia"
    settings = backend.settings
    assert settings.tolerations and settings.runtime_class_name == "nvidia"


def test_the_charts_defaults_keep_the_backends_defaults() -> None:
    section = backend_section(render({}))
    backend = KubernetesBackend(config=Config({"KubernetesBackend": section}))
    assert backend.sharing_mode == "reservation"
    assert backend.image == KubernetesBackend.class_traits()["image"].default_value
    assert backend.home_volumes[0]["persistentVolumeClaim"]["claimName"] == "claim-{username}"


# --- 2 and 3. the scheduler with only the chart's grants; notebooks with only z2jh's ---------


def test_the_scheduler_runs_on_what_the_chart_grants(cluster: Cluster, tmp_path: Path) -> None:
    """Jobs in their own namespace, the Lease in the release's (where the chart grants
    leases), a fractional job whose reservation pod has no API access: the scheduler reads
    the UUID it printed (pods/log) and writes it onto the pod."""
    fake = cluster.require_fake("grants RBAC per token")
    documents = render({"kubernetes": {"namespace": cluster.namespace}})

    async def scenario() -> None:
        async with connected(chart_backend(cluster, documents, tmp_path)) as backend:
            lease = fake.get("leases", RELEASE_NAMESPACE, "frachub-scheduler")
            assert lease and lease["spec"]["holderIdentity"] == "scheduler-0"
            await backend.start(make_job(1, [("node-a", [1], 0.5)]))
            (reservation,) = cluster.pods(f"{COMPONENT}={RESERVATION}")
            assert reservation["spec"]["automountServiceAccountToken"] is False
            assert "serviceAccountName" not in reservation["spec"]
            assert reservation["spec"]["priorityClassName"] == "frachub-notebook"
            uuid = reservation["metadata"]["annotations"][GPU_UUID]
            assert uuid == fake.devices(reservation["metadata"]["uid"])[0]
            (pod,) = await pods_of(cluster, 1)
            env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
            assert env["NVIDIA_VISIBLE_DEVICES"] == uuid
            assert pod["spec"]["priorityClassName"] == "frachub-training"
            fake.finish_pod(cluster.namespace, pod["metadata"]["name"], 0)
            assert await exits_of(backend) == [Exit(1, 0, "exited with code 0")]

    run(scenario)


def test_the_fake_refuses_what_the_chart_does_not_grant(cluster: Cluster, tmp_path: Path) -> None:
    """The RBAC the tests above rely on refuses for real: a Lease where the chart grants
    none (what the backend did before lease_namespace) is 403."""
    documents = render({"kubernetes": {"namespace": cluster.namespace}})

    async def scenario() -> None:
        backend = chart_backend(cluster, documents, tmp_path, lease_namespace=cluster.namespace)
        with pytest.raises(Exception, match="403") as refused:
            await backend.connect()
        assert 'cannot get resource "leases"' in str(refused.value)
        await backend.close()

    run(scenario)


@pytest.fixture
def hub_kubeconfig(monkeypatch: pytest.MonkeyPatch, cluster: Cluster, tmp_path: Path) -> str:
    """KubeSpawner's client as z2jh's hub holds it: the hub Role's verbs and nothing else."""
    fake = cluster.require_fake("grants RBAC per token")
    fake.grant(
        HUB_TOKEN,
        f"system:serviceaccount:{RELEASE_NAMESPACE}:hub",
        [(cluster.namespace, rule) for rule in Z2JH_HUB_RULES],
    )
    path = fake.kubeconfig(str(tmp_path / "hub.kubeconfig"), token=HUB_TOKEN)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", path)
    monkeypatch.setenv("KUBECONFIG", path)
    return path


def spawner_for(
    cluster: Cluster, alloc: dict[str, Any], user: str, timeout: float = 10.0
) -> FracKubeSpawner:
    spawner = make_spawner(
        cluster, alloc, frachub_priority_class="", frachub_reservation_timeout=timeout
    )
    spawner.user.name = user
    spawner.pod_name = f"jupyter-{user}"
    return spawner


def test_two_fractional_notebooks_share_a_gpu_under_z2jhs_hub_role(
    cluster: Cluster, tmp_path: Path, hub_kubeconfig: str
) -> None:
    """The first notebook creates the reservation, the second finds it; neither patches a pod
    nor reads a log (z2jh's hub Role allows neither): the scheduler writes the UUID."""
    fake = cluster.require_fake("grants RBAC per token")
    documents = render({"kubernetes": {"namespace": cluster.namespace}})

    async def scenario() -> None:
        async with connected(chart_backend(cluster, documents, tmp_path)):
            first = await create(spawner_for(cluster, allocation(0.25), "ada"))
            second = await create(spawner_for(cluster, {**allocation(0.5), "id": 42}, "bo"))
            (reservation,) = cluster.pods(f"{COMPONENT}={RESERVATION}")
            uuid = reservation["metadata"]["annotations"][GPU_UUID]
            for body in (first, second):
                env = {e["name"]: e.get("value") for e in body["spec"]["containers"][0]["env"]}
                assert env["NVIDIA_VISIBLE_DEVICES"] == uuid
            assert fake.get("pods", cluster.namespace, "jupyter-bo") is not None

    run(scenario)


def test_the_hub_token_is_refused_a_patch(cluster: Cluster, hub_kubeconfig: str) -> None:
    """What the spawner's claim did before (a PATCH) is 403 under z2jh's hub Role."""

    async def scenario() -> None:
        spawner = spawner_for(cluster, allocation(0.25), "ada", timeout=1.0)
        await create(spawner)  # no scheduler runs: the reservation stays without a UUID

    cluster.require_fake("grants RBAC per token")
    with pytest.raises(SpawnException, match=r"did not report a GPU.*is it running"):
        run(scenario)
    (reservation,) = cluster.pods(f"{COMPONENT}={RESERVATION}")

    async def patch() -> None:
        spawner = spawner_for(cluster, allocation(0.25), "ada")
        await spawner.api.patch_namespaced_pod(
            reservation["metadata"]["name"], cluster.namespace, {"metadata": {"labels": {"a": "b"}}}
        )

    with pytest.raises(Exception, match="Forbidden"):
        run(patch)


# --- the reservation pod's own program -----------------------------------------------------------


def test_the_reservation_program_prints_the_device_plugins_gpu(tmp_path: Path) -> None:
    """The real script under /bin/sh with only what a CUDA base image has (no curl, no API
    token, no nvidia-smi here): it prints the UUID the device plugin put in the environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("head", "sleep"):
        found = shutil.which(tool)
        assert found, tool
        os.symlink(found, bin_dir / tool)
    process = subprocess.Popen(
        list(KubernetesBackend().reservation_command),
        env={"PATH": str(bin_dir), "NVIDIA_VISIBLE_DEVICES": "GPU-6f2a,GPU-77b0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert reported_uuid(line) == "GPU-6f2a"
        assert process.poll() is None  # it keeps holding the GPU
    finally:
        process.kill()
        process.wait()
    failing = subprocess.run(
        list(KubernetesBackend().reservation_command),
        env={"PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert failing.returncode == 1 and "no GPU UUID" in failing.stderr


# --- 4. home volumes ------------------------------------------------------------------------------


def test_the_home_claim_is_named_as_kubespawner_names_it(
    cluster: Cluster, backend: Any, kube_default: None
) -> None:
    fake = cluster.require_fake("reads the pods")

    async def scenario() -> None:
        spawner = FracKubeSpawner(_mock=True, k8s_api_host=fake.url, namespace=cluster.namespace)
        user = spawner.user.name  # KubeSpawner's mock user: "mock@name"
        assert "@" in user
        _claim(fake, cluster.namespace, spawner.pvc_name, "ReadWriteOnce")  # z2jh made it
        made = await backend(
            home_volumes=[
                {"name": "home", "persistentVolumeClaim": {"claimName": "claim-{username}"}}
            ]
        )
        try:
            job = dataclasses.replace(make_job(7, [("node-a", [0], 1.0)]), user=user)
            await made.start(job)
            (pod,) = await pods_of(cluster, 7)
            (volume,) = pod["spec"]["volumes"]
            assert volume["persistentVolumeClaim"]["claimName"] == spawner.pvc_name
        finally:
            await made.close()

    run(scenario)


def _claim(fake: FakeKube, namespace: str, name: str, mode: str) -> None:
    fake.call(
        fake._create,
        "persistentvolumeclaims",
        namespace,
        {"metadata": {"name": name}, "spec": {"accessModes": [mode]}},
    )


def test_a_readwriteonce_home_is_refused_across_nodes(cluster: Cluster, backend: Any) -> None:
    fake = cluster.require_fake("creates claims")
    claim = format_template("claim-{username}", **user_fields("alice@example.org"))
    _claim(fake, cluster.namespace, claim, "ReadWriteOnce")
    _claim(fake, cluster.namespace, "shared", "ReadWriteMany")
    volumes = [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-{username}"}}]

    async def scenario() -> None:
        made = await backend(home_volumes=volumes)
        try:
            gang = make_job(8, [("node-a", [0], 1.0), ("node-b", [0], 1.0)])
            with pytest.raises(BackendError, match=f"{claim} is ReadWriteOnce.*node-a, node-b"):
                await made.start(gang)
            assert cluster.jobs(f"{WORKLOAD}=8") == []
            # a busy Job controller: no pod of 9 for a few seconds (a loaded machine may take
            # a second over the start and the check below)
            fake.pod_creation_delay = 3.0
            await made.start(make_job(9, [("node-a", [0], 1.0)]))  # one node: fine
            # before any pod of 9 exists (two starts of one cycle): its attempt says where
            assert cluster.pods(f"{WORKLOAD}=9") == []
            with pytest.raises(BackendError, match="pods on node-a use it"):
                await made.start(make_job(10, [("node-b", [1], 1.0)]))
            fake.pod_creation_delay = 0.0
            await pods_of(cluster, 9)
            with pytest.raises(BackendError, match="pods on node-a use it"):
                await made.start(make_job(10, [("node-b", [1], 1.0)]))
            assert cluster.jobs(f"{WORKLOAD}=10") == []
        finally:
            await made.close()
        shared = await backend(
            home_volumes=[{"name": "home", "persistentVolumeClaim": {"claimName": "shared"}}]
        )
        try:
            await shared.start(make_job(11, [("node-a", [1], 1.0), ("node-b", [1], 1.0)]))
        finally:
            await shared.close()

    run(scenario)


def _notebook(fake: FakeKube, namespace: str, node: str, claim: str) -> str:
    """A notebook pod FracHub did not create (another spawner's) with ``claim`` mounted."""
    body = {
        "metadata": {"name": f"jupyter-elsewhere-{node}", "labels": {"component": "singleuser"}},
        "spec": {
            "nodeSelector": {HOSTNAME: node},
            "containers": [
                {
                    "name": "notebook",
                    "image": "quay.io/jupyter/base-notebook",
                    "volumeMounts": [{"name": "home", "mountPath": "/home/jovyan"}],
                }
            ],
            "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }
    return fake.call(fake._create, "pods", namespace, body)["metadata"]["name"]


@pytest.mark.parametrize("foreign", [True, False], ids=["watched", "listed"])
def test_a_readwriteonce_home_held_by_a_pod_frachub_did_not_create_is_refused(
    cluster: Cluster, backend: Any, foreign: bool
) -> None:
    """The start-time check counts every pod of the namespace with the claim mounted, not
    only FracHub's: a notebook another spawner started holds it as well."""
    fake = cluster.require_fake("creates claims and a notebook pod")
    claim = format_template("claim-{username}", **user_fields("alice@example.org"))
    _claim(fake, cluster.namespace, claim, "ReadWriteOnce")
    _notebook(fake, cluster.namespace, "node-a", claim)
    volumes = [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-{username}"}}]

    async def scenario() -> None:
        made = await backend(home_volumes=volumes, count_foreign_pods=foreign)
        try:
            await eventually(
                lambda: (
                    (
                        fake.get("pods", cluster.namespace, "jupyter-elsewhere-node-a")["status"][
                            "phase"
                        ]
                        == "Running"
                    )
                    # watched: the backend knows of it once its watch has shown it, not before
                    and (
                        not foreign
                        or any(
                            p["metadata"]["name"] == "jupyter-elsewhere-node-a"
                            and p["spec"].get("nodeName")
                            for p in made.caches.foreign.objects.values()
                        )
                    )
                )
            )
            with pytest.raises(BackendError, match="pods on node-a use it"):
                await made.start(make_job(12, [("node-b", [0], 1.0)]))
            assert cluster.jobs(f"{WORKLOAD}=12") == []
        finally:
            await made.close()

    run(scenario)


def test_a_multi_attach_error_ends_the_attempt_in_words(cluster: Cluster, backend: Any) -> None:
    """A notebook that takes the ReadWriteOnce home on node-a after the start's check (a
    race, or a scheduler that may not read claims) leaves the job's pod on node-b in
    ContainerCreating with a Multi-Attach error: the attempt ends with those words (the
    service requeues it) instead of waiting forever, and the next start is refused."""
    fake = cluster.require_fake("starts a notebook between the check and the job's pod")
    claim = format_template("claim-{username}", **user_fields("alice@example.org"))
    _claim(fake, cluster.namespace, claim, "ReadWriteOnce")
    volumes = [{"name": "home", "persistentVolumeClaim": {"claimName": "claim-{username}"}}]

    async def scenario() -> None:
        made = await backend(home_volumes=volumes, volume_attach_timeout=0.3)
        try:
            # the job's pod is still being created ... (seconds: the notebook must run before
            # it, and a loaded machine takes a while to see it bound)
            fake.start_delay = 3.0
            await made.start(make_job(13, [("node-b", [0], 1.0)]))
            await eventually(
                lambda: [
                    p
                    for p in fake.objects("pods", cluster.namespace, f"{WORKLOAD}=13")
                    if p["spec"].get("nodeName")
                ],
                what="the job's pod bound to node-b",
            )
            fake.start_delay = 0.0  # ... when the notebook starts on node-a
            notebook = _notebook(fake, cluster.namespace, "node-a", claim)
            await eventually(
                lambda: (
                    (fake.get("pods", cluster.namespace, notebook) or {})
                    .get("status", {})
                    .get("phase")
                    == "Running"
                ),
                what="the notebook running",
            )
            pending = fake.objects("pods", cluster.namespace, f"{WORKLOAD}=13")
            assert [pod_phase(p) for p in pending] == ["Pending"]  # the notebook came first
            [end] = await exits_of(made)
            assert end.workload_id == 13 and end.exit_code is None, end
            assert "Kubernetes could not attach a volume to its pod" in end.message
            assert "Multi-Attach error for volume" in end.message
            assert f"used by pod(s) {notebook}" in end.message and "ReadWriteMany" in end.message
            await eventually(lambda: cluster.jobs(f"{WORKLOAD}=13") == [], what="no Job left")
            # the start reads the notebook from the backend's watch of foreign pods
            await eventually(
                lambda: any(
                    p["metadata"]["name"] == notebook and p["spec"].get("nodeName")
                    for p in made.caches.foreign.objects.values()  # type: ignore[union-attr]
                ),
                what="the backend's watch showing the notebook",
            )
            with pytest.raises(BackendError, match="pods on node-a use it"):
                await made.start(make_job(13, [("node-b", [0], 1.0)], restart_count=1))
        finally:
            await made.close()

    run(scenario)


# --- 5. tainted GPU nodes -------------------------------------------------------------------------

TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def test_fractional_jobs_reach_tainted_gpu_nodes_with_the_toleration(
    cluster: Cluster, backend: Any
) -> None:
    fake = cluster.require_fake("taints a node")
    fake.add_node("node-t", gpus=2, taints=[TAINT])

    async def scenario() -> None:
        plain = await backend()
        try:
            await plain.start(make_job(21, [("node-t", [0], 0.5)]))
            # the reservation asks nvidia.com/gpu, so admission tolerates the taint for it ...
            await eventually(
                lambda: [
                    p
                    for p in cluster.pods(f"{COMPONENT}={RESERVATION}")
                    if pod_phase(p) == "Running"
                ],
                what="the reservation running on the tainted node",
            )

            # ... but the fractional pod asks nothing and stays Pending
            def refused() -> bool:
                pods = cluster.pods(f"{WORKLOAD}=21")
                conditions = pods[0]["status"].get("conditions") or [] if pods else []
                return any("untolerated taint" in (c.get("message") or "") for c in conditions)

            await eventually(refused, what="the untolerated job pod")
            await plain.stop(21, {"backend": "kubernetes", **_handle(plain, 21)}, 0)
        finally:
            await plain.close()
        tolerant = await backend(tolerations=[TOLERATION], runtime_class_name="nvidia")
        try:
            await tolerant.start(make_job(22, [("node-t", [1], 0.5)]))
            (pod,) = await pods_of(cluster, 22)
            assert pod["spec"]["nodeName"] == "node-t"
            assert TOLERATION in pod["spec"]["tolerations"]
            assert pod["spec"]["runtimeClassName"] == "nvidia"
        finally:
            await tolerant.close()

    run(scenario, timeout=45)


def _handle(backend: KubernetesBackend, workload_id: int) -> dict[str, Any]:
    for attempt in backend._attempts.values():
        if attempt.workload_id == workload_id:
            return attempt.handle(backend.namespace)
    raise AssertionError(f"no attempt of {workload_id}")


# --- the fake refuses what a real server refuses --------------------------------------------------


def test_the_fake_refuses_objects_a_real_server_refuses(cluster: Cluster, backend: Any) -> None:
    """Every object a client writes is checked against the pinned Kubernetes schemas with
    unknown fields refused, so a manifest with a typo fails here and not on a cluster."""
    cluster.require_fake("checks the fake itself")

    async def scenario() -> None:
        made = await backend()
        kube = made.kube
        assert kube is not None
        try:
            pod = reservation_manifest("node-a", 0, made.settings, "2026-01-01T00:00:00.0Z")
            pod["spec"]["tolerance"] = []  # a typo of tolerations
            with pytest.raises(Exception, match=r"422.*tolerance"):
                await kube.call(kube.core.create_namespaced_pod, cluster.namespace, pod)
            job = {
                "metadata": {"name": "bad"},
                "spec": {"template": {"spec": {"containers": "not a list"}}},
            }
            with pytest.raises(Exception, match=r"422"):
                await kube.call(kube.batch.create_namespaced_job, cluster.namespace, job)
        finally:
            await made.close()

    run(scenario)
