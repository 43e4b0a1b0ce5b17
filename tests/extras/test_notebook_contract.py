"""A notebook's environment contract, built from the allocation the service returns: GPUs by
index for local processes, by UUID for containers, the share's memory from the GPU's."""

from __future__ import annotations

import pytest

from scheduler.common.contract import NVIDIA_VISIBLE_DEVICES
from scheduler.common.placement import describe_placement, placement_from_api
from spawner.mixin import notebook_contract

pytestmark = pytest.mark.unit

ALLOCATION = {
    "id": 7,
    "project": "vision",
    "placement": [
        {
            "node": "gpu-node-1",
            "gpus": [{"index": 3, "uuid": "GPU-aaaa", "share": 0.5, "memory_mib": 81920}],
        }
    ],
}
WHOLE = {
    "id": 8,
    "project": "vision",
    "placement": [
        {
            "node": "n",
            "gpus": [
                {"index": 0, "uuid": "GPU-0", "share": 1.0, "memory_mib": 1024},
                {"index": 1, "uuid": "GPU-1", "share": 1.0, "memory_mib": 1024},
            ],
        }
    ],
}


def test_local_processes_get_indices_in_nvml_order() -> None:
    env = notebook_contract(ALLOCATION, "ckpt")
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["FRACHUB_GPU_UUIDS"] == "GPU-aaaa"
    assert env["FRACHUB_GPU_FRACTION"] == "0.5"
    assert env["FRACHUB_GPU_MEMORY_MIB"] == "40960"
    assert env["FRACHUB_WORKLOAD_ID"] == "7"
    assert env["FRACHUB_CHECKPOINT_DIR"] == "ckpt"
    assert env["FRACHUB_RESTART_COUNT"] == "0"


def test_containers_get_uuids() -> None:
    env = notebook_contract(ALLOCATION, "ckpt", NVIDIA_VISIBLE_DEVICES)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-aaaa"
    assert "CUDA_VISIBLE_DEVICES" not in env


def test_whole_gpus() -> None:
    env = notebook_contract(WHOLE, "ckpt")
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env["FRACHUB_GPU_FRACTION"] == "1"
    assert describe_placement(placement_from_api(WHOLE["placement"])) == "n GPUs 0, 1"
    allocated = placement_from_api(ALLOCATION["placement"])
    assert describe_placement(allocated) == "gpu-node-1 GPU 3 (0.5)"
