"""A local notebook on a shared GPU under MPS: the spawner adds the variables the service
put in the allocation (``sharing_env``, from ``scheduler/backends/mps.py``) to the server's
environment, above the contract (its GPU by UUID, as its daemon numbers it)."""

from __future__ import annotations

import pytest

from spawner.local import FracLocalSpawner

pytestmark = pytest.mark.unit

MPS = {
    "CUDA_MPS_PIPE_DIRECTORY": "/srv/frachub/mps/gpu1/pipe",
    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=41984M",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
    "CUDA_VISIBLE_DEVICES": "GPU-b",
}


def allocation(sharing_env: dict[str, str] | None) -> dict:
    return {
        "id": 7,
        "project": "vision",
        "placement": [
            {
                "node": "local",
                "gpus": [{"index": 1, "uuid": "GPU-b", "share": 0.5, "memory_mib": 81920}],
            }
        ],
        "sharing_env": sharing_env,
    }


@pytest.mark.parametrize("sharing_env", [MPS, None])
def test_the_notebook_gets_the_allocation_s_sharing_variables(sharing_env) -> None:
    spawner = FracLocalSpawner()
    spawner.allocation_id = 7
    spawner.allocation = allocation(sharing_env)
    env = spawner.frachub_env()
    assert env["FRACHUB_GPU_FRACTION"] == "0.5"
    if sharing_env is None:  # cooperative: the contract alone, the GPU by index
        assert env["CUDA_VISIBLE_DEVICES"] == "1"
        assert not any(name.startswith("CUDA_MPS") for name in env)
    else:
        assert {name: env[name] for name in MPS} == MPS
