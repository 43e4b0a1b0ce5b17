"""The environment contract: what a process gets when it holds a GPU share.

Pure functions, shared by every backend and by the notebook spawner, so that a training job
and a notebook on the same share see the same variables (docs/service.md, "Environment"):

- ``contract_env(...)`` builds the variables of one replica: the visible devices, the
  ``FRACHUB_*`` facts (its ``Share``, ``scheduler/common/share.py``, as a fraction and in
  MiB), ``PYTHONUNBUFFERED=1`` (a job's prints reach its log as they happen), and the
  frameworks' own cooperative caps (JAX/XLA, TensorFlow; the PyTorch cap, JAX's exact
  fraction and what ``torch.cuda.mem_get_info`` reports are the start-up hook's, in
  ``scheduler/backends/pyhook``, which reads ``FRACHUB_GPU_FRACTION`` and
  ``FRACHUB_GPU_MEMORY_MIB``).
- ``rendezvous(...)`` gives one replica of a gang its torchrun-style place (``RANK``,
  ``WORLD_SIZE``, ``LOCAL_RANK``, ...); a single replica has none.
- ``visible_gpus(...)`` says which GPUs a replica is shown, so that a gang's replicas on one
  node find their own GPU at ``cuda:LOCAL_RANK``, as torchrun's processes do.
- ``prepend_path(...)`` puts a directory (the start-up hook) in front of a ``PYTHONPATH``.

A job's credentials (``FRACHUB_URL`` and its own hub token in ``JUPYTERHUB_API_TOKEN``, issued
by the service per attempt: ``scheduler/service/hub/jobtokens.py``) are not part of this table:
they come in ``JobSpec.credentials`` and each backend puts them above the contract where
they stay secret (the local backend in the process's environment, the Kubernetes backend in
a Secret the pod reads).

Nothing here reads the process environment, the clock or the file system: callers pass
everything in, which keeps the contract testable as a table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scheduler.common.limits import MILLI
from scheduler.common.placement import Placement, ReplicaPlacement
from scheduler.common.share import Share

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
"""Local processes: GPU indices as NVML numbers them (PCI bus order, hence CUDA_DEVICE_ORDER)."""
NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
"""Containers: GPU UUIDs, read by the NVIDIA container runtime."""
DEVICE_VARIABLES = (CUDA_VISIBLE_DEVICES, NVIDIA_VISIBLE_DEVICES)

CHECKPOINT_MARK = ".frachub-checkpointed"
"""The file in ``FRACHUB_CHECKPOINT_DIR`` that ``hub_ext.client.checkpointed()`` touches when
the job carries no credentials for the API; the local backend looks at it on every poll."""

UuidLookup = Callable[[str, int], str]
"""(node, GPU index) -> GPU UUID; ``Inventory.uuid`` is one."""


@dataclass(frozen=True)
class Rendezvous:
    """Where one replica of a gang stands, in the variables ``torchrun`` would set."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int


def rendezvous(
    placement: Placement, rank: int, master_addr: str, master_port: int
) -> Rendezvous | None:
    """The gang position of replica ``rank``; None for a single replica, which needs none.

    ``LOCAL_RANK`` counts the earlier replicas placed on the same node, as torchrun does for
    the processes it starts on one machine.
    """
    if not 0 <= rank < len(placement):
        raise ValueError(f"rank {rank} is outside a placement of {len(placement)} replicas")
    if len(placement) == 1:
        return None
    if not 0 < master_port < 65536:
        raise ValueError(f"master_port must be in 1..65535, not {master_port}")
    node = placement[rank].node
    same_node = [i for i, replica in enumerate(placement) if replica.node == node]
    return Rendezvous(
        rank=rank,
        world_size=len(placement),
        local_rank=same_node.index(rank),
        local_world_size=len(same_node),
        master_addr=master_addr,
        master_port=master_port,
    )


def visible_gpus(placement: Placement, rank: int) -> tuple[int, ...]:
    """The GPU indices replica ``rank`` is shown, in the order CUDA will number them.

    A gang's replicas that share a node, one GPU each and no GPU twice, are each shown all
    of those GPUs in local-rank order: ``cuda:LOCAL_RANK`` is then the replica's own GPU,
    which is what a torchrun-style script does (``torch.cuda.set_device(LOCAL_RANK)``) and
    what NCCL needs (one device per rank; ``cuda:0`` everywhere is its "duplicate GPU"
    error). Every other replica (alone, several GPUs each, or sharing one GPU) is shown its
    own GPUs only, so its first GPU is ``cuda:0``.
    """
    own = tuple(share.index for share in placement[rank].gpus)
    node = placement[rank].node
    mates = [replica for replica in placement if replica.node == node]
    if len(mates) < 2 or any(len(replica.gpus) != 1 for replica in mates):
        return own
    devices = tuple(replica.gpus[0].index for replica in mates)
    return devices if len(set(devices)) == len(devices) else own


def contract_env(
    *,
    workload_id: int,
    replica: ReplicaPlacement,
    share: Share,
    restart_count: int,
    checkpoint_dir: str,
    uuid_of: UuidLookup,
    device_variable: str = CUDA_VISIBLE_DEVICES,
    rendezvous: Rendezvous | None = None,
    visible: Sequence[int] | None = None,
) -> dict[str, str]:
    """The variables one replica holding ``share`` of each of ``replica.gpus`` gets, all as
    strings.

    ``XLA_PYTHON_CLIENT_MEM_FRACTION`` is the share's fraction, which JAX takes of the total
    CUDA reports: a little less than the share's memory (CUDA's total is NVML's less what the
    driver reserves, which the service does not know). FracHub's start-up hook replaces it,
    when the program imports JAX, with the fraction that holds the share's memory.

    ``device_variable`` is ``CUDA_VISIBLE_DEVICES`` for local processes (indices, with
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so CUDA numbers GPUs as NVML does) or
    ``NVIDIA_VISIBLE_DEVICES`` for containers (UUIDs). A replica without GPUs gets an empty
    ``CUDA_VISIBLE_DEVICES`` / ``NVIDIA_VISIBLE_DEVICES=none``, which hides every GPU rather
    than exposing all of them. ``FRACHUB_GPU_UUIDS`` is always set, so tools inside the job
    can find their GPUs in NVML whichever variable the backend uses. ``visible`` (the GPU
    indices on the replica's node to show, ``visible_gpus``) defaults to the replica's own.
    """
    if device_variable not in DEVICE_VARIABLES:
        raise ValueError(
            f"device_variable must be one of {', '.join(DEVICE_VARIABLES)}, not {device_variable!r}"
        )
    if not 0 <= share.milli <= MILLI:
        raise ValueError(f"share.milli must be in [0, {MILLI}], not {share.milli}")
    if share.memory_mib < 0:
        raise ValueError(f"share.memory_mib must be >= 0, not {share.memory_mib}")
    if restart_count < 0:
        raise ValueError(f"restart_count must be >= 0, not {restart_count}")
    indices = [share.index for share in replica.gpus]
    uuids = [uuid_of(replica.node, index) for index in indices]
    shown = list(visible) if visible is not None else indices
    if not set(indices) <= set(shown):
        raise ValueError(f"visible GPUs {shown} leave out the replica's own {indices}")
    fraction = _number(share.fraction)
    env = {
        "FRACHUB_WORKLOAD_ID": str(workload_id),
        "FRACHUB_GPU_FRACTION": fraction,
        "FRACHUB_GPU_MEMORY_MIB": str(share.memory_mib),
        "FRACHUB_GPU_UUIDS": ",".join(uuids),
        "FRACHUB_CHECKPOINT_DIR": checkpoint_dir,
        "FRACHUB_RESTART_COUNT": str(restart_count),
        "XLA_PYTHON_CLIENT_MEM_FRACTION": fraction,
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
        # a job's output goes to a file: buffered, a preempted job's last lines (SIGTERM ends
        # it before the buffer is flushed) would never reach its log
        "PYTHONUNBUFFERED": "1",
    }
    if device_variable == CUDA_VISIBLE_DEVICES:
        env[CUDA_VISIBLE_DEVICES] = ",".join(str(index) for index in shown)
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    else:
        shown_uuids = [uuid_of(replica.node, index) for index in shown]
        env[NVIDIA_VISIBLE_DEVICES] = ",".join(shown_uuids) or "none"
    if rendezvous is not None:
        env.update(
            RANK=str(rendezvous.rank),
            WORLD_SIZE=str(rendezvous.world_size),
            LOCAL_RANK=str(rendezvous.local_rank),
            LOCAL_WORLD_SIZE=str(rendezvous.local_world_size),
            MASTER_ADDR=rendezvous.master_addr,
            MASTER_PORT=str(rendezvous.master_port),
        )
    return env


def prepend_path(entry: str, existing: str | None) -> str:
    """``entry`` first on a colon-separated search path such as ``PYTHONPATH``."""
    parts = [part for part in (existing or "").split(":") if part and part != entry]
    return ":".join([entry, *parts])


def _number(value: float) -> str:
    """0.25 -> "0.25", 1.0 -> "1": what a person (and ``float()``) reads back."""
    return f"{value:.6g}"
