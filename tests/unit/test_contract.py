"""The environment contract as a table: placement and share in, variables out."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from scheduler.common.contract import (
    CUDA_VISIBLE_DEVICES,
    NVIDIA_VISIBLE_DEVICES,
    Rendezvous,
    contract_env,
    prepend_path,
    rendezvous,
    visible_gpus,
)
from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.common.share import Share
from scheduler.engine.ledger import Ledger
from scheduler.engine.model import Node, Request
from scheduler.engine.placement import Pack, Spread, place

pytestmark = pytest.mark.unit


def uuid_of(node: str, index: int) -> str:
    return f"GPU-{node}-{index}"


def env_for(replica: ReplicaPlacement, **overrides: object) -> dict[str, str]:
    args: dict = {
        "workload_id": 42,
        "replica": replica,
        "share": Share(250, 20480),
        "restart_count": 2,
        "checkpoint_dir": "/data/checkpoints/42",
        "uuid_of": uuid_of,
    }
    args.update(overrides)
    return contract_env(**args)


QUARTER = ReplicaPlacement("n1", (GpuShare(3, 250),))
TWO_WHOLE = ReplicaPlacement("n1", (GpuShare(0, 1000), GpuShare(1, 1000)))
NO_GPU = ReplicaPlacement("n1", ())

CASES = {
    "a quarter of GPU 3, local": (
        QUARTER,
        {},
        {
            "CUDA_VISIBLE_DEVICES": "3",
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "FRACHUB_GPU_FRACTION": "0.25",
            "FRACHUB_GPU_MEMORY_MIB": "20480",
            "FRACHUB_GPU_UUIDS": "GPU-n1-3",
            "FRACHUB_WORKLOAD_ID": "42",
            "FRACHUB_CHECKPOINT_DIR": "/data/checkpoints/42",
            "FRACHUB_RESTART_COUNT": "2",
            "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.25",
            "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
            "TF_FORCE_GPU_ALLOW_GROWTH": "true",
            "PYTHONUNBUFFERED": "1",
        },
    ),
    "two whole GPUs in a container": (
        TWO_WHOLE,
        {"share": Share(1000, 81920), "device_variable": NVIDIA_VISIBLE_DEVICES},
        {
            "NVIDIA_VISIBLE_DEVICES": "GPU-n1-0,GPU-n1-1",
            "FRACHUB_GPU_FRACTION": "1",
            "FRACHUB_GPU_MEMORY_MIB": "81920",
            "FRACHUB_GPU_UUIDS": "GPU-n1-0,GPU-n1-1",
            "FRACHUB_WORKLOAD_ID": "42",
            "FRACHUB_CHECKPOINT_DIR": "/data/checkpoints/42",
            "FRACHUB_RESTART_COUNT": "2",
            "XLA_PYTHON_CLIENT_MEM_FRACTION": "1",
            "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
            "TF_FORCE_GPU_ALLOW_GROWTH": "true",
            "PYTHONUNBUFFERED": "1",
        },
    ),
}


@pytest.mark.parametrize(("replica", "overrides", "expected"), CASES.values(), ids=CASES.keys())
def test_contract_env(replica: ReplicaPlacement, overrides: dict, expected: dict) -> None:
    assert env_for(replica, **overrides) == expected


@pytest.mark.parametrize(
    ("variable", "hidden"),
    [(CUDA_VISIBLE_DEVICES, ""), (NVIDIA_VISIBLE_DEVICES, "none")],
    ids=["local", "container"],
)
def test_no_gpus_hides_all_gpus(variable: str, hidden: str) -> None:
    """An unset variable would expose every GPU of the machine; an empty one exposes none."""
    assert env_for(NO_GPU, device_variable=variable)[variable] == hidden


def test_gang_gets_torchrun_variables() -> None:
    placement = (QUARTER, ReplicaPlacement("n2", (GpuShare(0, 250),)), QUARTER)
    where = rendezvous(placement, 2, "10.0.0.1", 29500)
    assert where == Rendezvous(2, 3, 1, 2, "10.0.0.1", 29500)
    env = env_for(QUARTER, rendezvous=where)
    gang = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    assert [env[name] for name in gang] == ["2", "3", "1", "2", "10.0.0.1", "29500"]


def test_single_replica_has_no_rendezvous() -> None:
    assert rendezvous((QUARTER,), 0, "127.0.0.1", 0) is None
    assert "RANK" not in env_for(QUARTER, rendezvous=None)


REFUSALS = {
    "unknown device variable": ({"device_variable": "ROCR_VISIBLE_DEVICES"}, "device_variable"),
    "share above one GPU": ({"share": Share(1500, 1)}, "share.milli"),
    "negative memory": ({"share": Share(250, -1)}, "share.memory_mib"),
    "negative restart count": ({"restart_count": -1}, "restart_count"),
}


@pytest.mark.parametrize(("overrides", "named"), REFUSALS.values(), ids=REFUSALS.keys())
def test_contract_refuses_nonsense(overrides: dict, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        env_for(QUARTER, **overrides)


def test_rendezvous_refuses_rank_outside_placement() -> None:
    with pytest.raises(ValueError, match="rank 2"):
        rendezvous((QUARTER, QUARTER), 2, "127.0.0.1", 29500)


def test_unknown_gpu_is_the_lookups_error() -> None:
    def no_such_gpu(node: str, index: int) -> str:
        raise KeyError(f"no GPU {index} on node {node!r}")

    with pytest.raises(KeyError, match="no GPU 3"):
        env_for(QUARTER, uuid_of=no_such_gpu)


@pytest.mark.parametrize(
    ("existing", "expected"),
    [(None, "/hook"), ("", "/hook"), ("/a:/b", "/hook:/a:/b"), ("/a:/hook", "/hook:/a")],
    ids=["unset", "empty", "kept after", "not twice"],
)
def test_prepend_path(existing: str | None, expected: str) -> None:
    assert prepend_path("/hook", existing) == expected


def test_contract_module_is_pure() -> None:
    """Like the engine: the contract takes everything as input, so a table can test it."""
    source = Path(__file__).parents[2] / "scheduler" / "common" / "contract.py"
    imported = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported <= {"__future__", "collections", "dataclasses", "scheduler"}


def test_gang_replicas_on_one_node_see_each_others_gpus_in_local_rank_order() -> None:
    """torchrun's processes call torch.cuda.set_device(LOCAL_RANK): cuda:LOCAL_RANK must be
    the replica's own GPU, and no two ranks may get the same device (NCCL)."""
    on = [ReplicaPlacement("n1", (GpuShare(g, 500),)) for g in (3, 1)]
    placement = (on[0], ReplicaPlacement("n2", (GpuShare(0, 500),)), on[1])
    assert [visible_gpus(placement, rank) for rank in range(3)] == [(3, 1), (0,), (3, 1)]
    for rank in (0, 2):
        where = rendezvous(placement, rank, "10.0.0.1", 29500)
        assert where is not None
        env = env_for(placement[rank], rendezvous=where, visible=visible_gpus(placement, rank))
        shown = env[CUDA_VISIBLE_DEVICES].split(",")
        assert shown[where.local_rank] == str(placement[rank].gpus[0].index)
        assert env["FRACHUB_GPU_UUIDS"] == f"GPU-n1-{placement[rank].gpus[0].index}"
    uuids = env_for(on[1], visible=(3, 1), device_variable=NVIDIA_VISIBLE_DEVICES)
    assert uuids[NVIDIA_VISIBLE_DEVICES] == "GPU-n1-3,GPU-n1-1"


def test_replicas_sharing_a_gpu_or_holding_several_see_their_own() -> None:
    stacked = (QUARTER, QUARTER)
    assert visible_gpus(stacked, 1) == (QUARTER.gpus[0].index,)
    pairs = tuple(
        ReplicaPlacement("n1", (GpuShare(a, 1000), GpuShare(b, 1000))) for a, b in ((0, 1), (2, 3))
    )
    assert visible_gpus(pairs, 1) == (2, 3)
    with pytest.raises(ValueError, match="leave out"):
        env_for(pairs[1], visible=(0, 1))


def test_a_fractional_gang_spreads_over_free_gpus() -> None:
    """Two halves go to two GPUs while two are free (both scorers), stacking only when one
    GPU is all there is."""
    for scorer in (Pack(), Spread()):
        ledger = Ledger([Node("n1", gpus=2)])
        placement = place(ledger, Request(gpus=0.5, replicas=2), scorer)
        assert placement is not None
        assert sorted(r.gpus[0].index for r in placement) == [0, 1], scorer.name
    single = place(Ledger([Node("n1", gpus=1)]), Request(gpus=0.5, replicas=2), Pack())
    assert single is not None and [r.gpus[0].index for r in single] == [0, 0]
