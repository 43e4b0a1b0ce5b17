"""Node labels and GPU models on Kubernetes: the real ``frachub service`` with the Kubernetes
backend, behind a real JupyterHub, against the fake API server.

The cluster's Node objects carry what GPU feature discovery and the cloud put there
(``nvidia.com/gpu.product``, ``topology.kubernetes.io/zone``): a gang lands within one zone,
and a job that names a GPU model (``gpu_model``) waits for that model and says so.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from hubharness import API_PATH, Hub, ServiceProcess
from service_client import CHECKED, submit, wait_for, wait_state, workload

from .conftest import started_fake
from .fakeapi import FakeKube
from .test_service_on_kubernetes import CONFIG as SERVICE_CONFIG

NAMESPACE = "default"
ZONE = "topology.kubernetes.io/zone"
A100 = "NVIDIA-A100-SXM4-80GB"
T4 = "Tesla-T4"

# the issue-5 tests' service configuration, with one big project
CONFIG = SERVICE_CONFIG + 'c.FracHubService.queues = [{{"name": "lab", "deserved_gpus": 16}}]\n'


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeKube]:
    with started_fake() as cluster:
        cluster.add_node("a100-a-0", gpus=4, product=A100, labels={ZONE: "a"})
        cluster.add_node("a100-b-0", gpus=4, product=A100, labels={ZONE: "b"})
        cluster.add_node("a100-b-1", gpus=4, product=A100, labels={ZONE: "b"})
        cluster.add_node("t4-a", gpus=4, memory_mib=15360, product=T4, labels={ZONE: "a"})
        yield cluster


@pytest.fixture(scope="module")
def client(
    hub: Hub,
    fake: FakeKube,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[httpx.Client]:
    workdir = tmp_path_factory.mktemp("kube-labels")
    kubeconfig = fake.kubeconfig(str(workdir / "kubeconfig"), NAMESPACE)
    config = CONFIG.format(kubeconfig=kubeconfig, namespace=NAMESPACE)
    service = ServiceProcess(hub, config, workdir, env={"KUBECONFIG": kubeconfig}).start()
    hub.create_user("zoe", groups=["lab"])
    c = httpx.Client(
        base_url=hub.service_url(API_PATH),
        headers={"Authorization": f"token {hub.token_for('zoe')}"},
        timeout=30,
        event_hooks=CHECKED,
    )
    try:
        yield c
    finally:
        for item in c.get("workloads?active").json():
            c.delete(f"workloads/{item['id']}")
        c.close()
        service.stop()


def test_node_labels_reach_the_engine(client: httpx.Client) -> None:
    nodes = {node["name"]: node for node in client.get("nodes").json()}
    assert nodes["a100-b-1"]["labels"] == {ZONE: "b"}  # hostname and GFD labels are not topology
    assert (nodes["t4-a"]["gpu_model"], nodes["a100-a-0"]["gpu_model"]) == (T4, A100)


def test_a_gang_stays_in_one_zone_and_a_job_waits_for_its_gpu_model(client) -> None:
    busy = wait_state(client, submit(client, gpus=2, gpu_model=A100)["id"], "running")
    assert [r["node"] for r in busy["placement"]] == ["a100-a-0"]

    # The first replica would pack onto a100-a-0 (fewest free), but zone a has no room for
    # the others on an A100 (t4-a is the wrong model): the whole gang goes to zone b.
    gang = wait_state(client, submit(client, gpus=2, replicas=3, gpu_model=[A100])["id"], "running")
    assert sorted(r["node"] for r in gang["placement"]) == ["a100-b-0", "a100-b-0", "a100-b-1"]

    for _ in range(2):  # the last two A100 GPUs on a100-a-0 and on a100-b-1
        wait_state(client, submit(client, gpus=2, gpu_model=A100)["id"], "running")
    held = submit(client, gpus=1, gpu_model=A100)
    anywhere = wait_state(client, submit(client, gpus=1)["id"], "running")
    assert [r["node"] for r in anywhere["placement"]] == ["t4-a"]
    reason = wait_for(  # past the "waiting for the scheduler's next cycle" of its first instant
        lambda: (
            "gpu_model" in (why := workload(client, held["id"])["pending_reason"] or "") and why
        ),
        what="the held job's reason",
    )
    assert workload(client, held["id"])["state"] == "pending"
    assert reason == (
        f"waits for a GPU of model {A100} (its gpu_model): needs 1 GPU; the most wholly free "
        f"on any {A100} node is 0; other models do not count"
    )
