"""A real two-process ``torch.distributed`` run (gloo, CPU) through the local backend: the
gang's replicas rendezvous on MASTER_ADDR/MASTER_PORT with the RANK and WORLD_SIZE FracHub
gives them, all-reduce a tensor, and each finds its own GPU at ``cuda:LOCAL_RANK`` of what it
is shown (``CUDA_VISIBLE_DEVICES``), the device a CUDA run would ``set_device`` to.

Needs PyTorch (the CPU wheel: ``pip install torch==2.13.0``); skips without it."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
import time
from pathlib import Path

import pytest

from scheduler.backends.base import Exit, JobSpec
from scheduler.backends.local import LocalBackend
from scheduler.common.placement import GpuShare, ReplicaPlacement

pytestmark = pytest.mark.backends
torch = pytest.importorskip("torch", reason="PyTorch is not installed: pip install torch==2.13.0")

SCRIPT = textwrap.dedent(
    """
    import json, os
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)
    gathered = [None] * world
    shown = os.environ["CUDA_VISIBLE_DEVICES"].split(",")
    dist.all_gather_object(gathered, shown[local_rank])
    print(json.dumps({
        "rank": rank, "world_size": world, "local_rank": local_rank,
        "local_world_size": int(os.environ["LOCAL_WORLD_SIZE"]),
        "sum": total.item(), "shown": shown,
        "set_device": local_rank, "physical_gpu": shown[local_rank],
        "all_physical": gathered,
    }), flush=True)
    dist.destroy_process_group()
    """
)


def test_two_ranks_rendezvous_and_each_sets_its_own_device(tmp_path: Path) -> None:
    backend = LocalBackend(
        data_dir=str(tmp_path / "data"),
        inventory_source="declared",
        declared_inventory=[{"name": "local", "gpus": 4, "gpu_memory_gib": 80}],
        run_as_user=False,
    )
    # what the engine gives a 2 x 0.5-GPU gang: two GPUs (the pack scorer spreads it)
    placement = (
        ReplicaPlacement("local", (GpuShare(2, 500),)),
        ReplicaPlacement("local", (GpuShare(3, 500),)),
    )
    job = JobSpec(
        workload_id=1,
        name="ddp",
        user="ddp",
        project="vision",
        command=[sys.executable, "-c", SCRIPT],
        working_dir=str(tmp_path),
        env={},
        placement=placement,
        restart_count=0,
        replicas=2,
    )

    async def scenario() -> list[Exit]:
        await backend.start(job)
        found: list[Exit] = []
        deadline = time.monotonic() + 120
        while not found:
            assert time.monotonic() < deadline, "the DDP run did not end within 120 s"
            found = await backend.poll()
            await asyncio.sleep(0.1)
        await backend.close()
        return found

    ends = asyncio.run(scenario())
    logs = [Path(backend.log_path(1, rank) or "").read_text() for rank in (0, 1)]
    assert ends == [Exit(1, 0, "exited with code 0")], logs
    results = [json.loads(log.strip().splitlines()[-1]) for log in logs]
    for rank, result in enumerate(results):
        print(f"\nDDP rank {rank}: {json.dumps(result)}")
        assert (result["rank"], result["world_size"], result["local_rank"]) == (rank, 2, rank)
        assert result["local_world_size"] == 2
        assert result["sum"] == 3.0  # 1 + 2: the all-reduce went through the rendezvous
        assert result["shown"] == ["2", "3"]
        assert result["physical_gpu"] == str(placement[rank].gpus[0].index)
        assert result["all_physical"] == ["2", "3"]  # one device per rank, none twice
