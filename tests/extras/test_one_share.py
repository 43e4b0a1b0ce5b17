"""One share for one placement, whoever computes it: the local backend's job environment,
the Kubernetes backend's (environment and HAMi's ``nvidia.com/gpumem``), and a notebook's,
local or on Kubernetes, built from the allocation the service's API returns. Each is
``share_of`` the replica and its GPU's memory as the backend's inventory has it, on a GPU
whose memory (an H200's 143,771 MiB) makes the rounding show."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.backends.base import JobSpec
from scheduler.backends.kubernetes.gpus import GPUMEM, gpu_resources
from scheduler.backends.kubernetes.jobs import job_environment
from scheduler.backends.kubernetes.pods import PodSettings
from scheduler.backends.kubernetes.sharing import job_shares
from scheduler.backends.local import LocalBackend
from scheduler.common.contract import NVIDIA_VISIBLE_DEVICES
from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.common.share import Share, share_of
from scheduler.service.views import placement_json
from spawner.mixin import allocation_share, notebook_contract

pytestmark = pytest.mark.unit

H200_MIB = 143_771
SHARE_VARIABLES = (
    "FRACHUB_GPU_FRACTION",
    "FRACHUB_GPU_MEMORY_MIB",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
)

PLACEMENTS = {
    "30 GiB asked (milli 214)": ReplicaPlacement("gpu-1", (GpuShare(1, 214),)),
    "a quarter": ReplicaPlacement("gpu-1", (GpuShare(0, 250),)),
    "a third": ReplicaPlacement("gpu-1", (GpuShare(2, 333),)),
    "one whole GPU": ReplicaPlacement("gpu-1", (GpuShare(3, 1000),)),
    "two whole GPUs": ReplicaPlacement("gpu-1", (GpuShare(0, 1000), GpuShare(1, 1000))),
}


@pytest.fixture
def local(tmp_path: Path) -> LocalBackend:
    """A local backend declaring a node of four H200s (143,771 MiB each)."""
    h200 = {"name": "gpu-1", "gpus": 4, "gpu_memory_gib": H200_MIB / 1024, "model": "H200"}
    return LocalBackend(
        data_dir=str(tmp_path),
        inventory_source="declared",
        declared_inventory=[h200],
        run_as_user=False,
    )


def job(replica: ReplicaPlacement) -> JobSpec:
    return JobSpec(
        workload_id=9,
        name="share",
        user="ada",
        project="vision",
        command="true",
        working_dir=None,
        env={},
        placement=(replica,),
    )


def variables(env: dict[str, str]) -> tuple[str, ...]:
    return tuple(env[name] for name in SHARE_VARIABLES)


@pytest.mark.parametrize("replica", PLACEMENTS.values(), ids=PLACEMENTS.keys())
def test_every_consumer_computes_the_same_share(
    replica: ReplicaPlacement, local: LocalBackend, tmp_path: Path
) -> None:
    share = share_of(replica, H200_MIB)
    expected = (f"{share.fraction:g}", str(share.memory_mib), f"{share.fraction:g}")
    inventory = local.inventory()

    local_env = local._contract(job(replica), 0, str(tmp_path), 29500)

    kube_share = job_shares(job(replica), inventory, "hami")[0]
    kube_env = job_environment(
        job(replica), 0, kube_share, PodSettings("ns", "img"), {}, "base", None, "{home}"
    )

    allocation = {"id": 9, "placement": placement_json((replica,), inventory)}
    notebook_env = notebook_contract(allocation, "ckpt")
    kube_notebook_env = notebook_contract(allocation, "ckpt", NVIDIA_VISIBLE_DEVICES)

    assert kube_share == allocation_share(allocation) == share
    for env in (local_env, kube_env, notebook_env, kube_notebook_env):
        assert variables(env) == expected
    if share.is_partial:  # HAMi's limit, from the backend's share and from the spawner's
        pods = [gpu_resources("hami", replica, s)[GPUMEM] for s in (kube_share, share)]
        assert pods == [str(share.memory_mib)] * 2


def test_thirty_gib_asked_holds_thirty_gib(local: LocalBackend) -> None:
    assert local.inventory().gpus[0].memory_mib == H200_MIB
    share = local.inventory().share(PLACEMENTS["30 GiB asked (milli 214)"])
    assert share == Share(214, 30_766) and share.memory_mib >= 30 * 1024
