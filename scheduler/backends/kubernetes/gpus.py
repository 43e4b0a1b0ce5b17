"""The GPUs of a pod in each sharing mode, and the shares annotation that records them.

- **Reservation mode** (KAI's way, ``reservation.py``): whole GPUs are ``nvidia.com/gpu: N``;
  a fraction asks for no GPU and gets ``NVIDIA_VISIBLE_DEVICES`` of the GPU its reservation
  pod holds.
- **HAMi mode**: GPUs are HAMi's. Every GPU pod names HAMi's scheduler, asks
  ``nvidia.com/gpu`` with ``nvidia.com/gpumem`` (a share) or 100 % memory and cores (a whole
  GPU), and carries ``nvidia.com/use-gpuuuid`` so HAMi puts it on the GPUs FracHub chose.

Every pod FracHub places carries its shares as ``node:index:milli`` (``frachub.io/gpu-shares``):
what a restarted scheduler and the reservation collector read back. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from scheduler.common.placement import Placement, ReplicaPlacement
from scheduler.common.share import Share

if TYPE_CHECKING:
    from scheduler.backends.kubernetes.pods import PodSettings

SHARING_MODES = ("reservation", "hami")
GPU = "nvidia.com/gpu"
GPUMEM = "nvidia.com/gpumem"
GPUMEM_PERCENTAGE = "nvidia.com/gpumem-percentage"
GPUCORES = "nvidia.com/gpucores"
HAMI_REGISTER = "hami.io/node-nvidia-register"
"""On a Node: the physical GPUs HAMi's device plugin registered (UUID, memory, model)."""
HAMI_USE_UUID = "nvidia.com/use-gpuuuid"
"""On a pod: the only GPUs (UUIDs, comma-separated) HAMi's scheduler may give it."""
HAMI_SCHEDULER = "hami-scheduler"
"""HAMi's chart's default ``schedulerName``."""


def is_fractional(replica: ReplicaPlacement) -> bool:
    return len(replica.gpus) == 1 and replica.gpus[0].milli < 1000


def gpu_resources(sharing: str, replica: ReplicaPlacement, share: Share) -> dict[str, str]:
    """Resource limits of one replica holding ``share`` of each GPU. Reservation mode: whole
    GPUs are ``nvidia.com/gpu: N`` and a fraction asks nothing (its reservation pod holds the
    GPU). HAMi mode, where ``nvidia.com/gpu`` counts devices each pod gets a slice of: a
    fraction is one device with ``nvidia.com/gpumem`` (the share's MiB, which HAMi enforces;
    ``share_of`` rounds them down, so the shares the engine fits on one GPU fit in HAMi's count
    of its memory too); whole GPUs are N devices with 100 % of
    their memory and cores, which HAMi gives only to a device nobody else uses (without
    them a pod gets HAMi's ``defaultMemory``, or shares the device's compute)."""
    if not replica.gpus:
        return {}
    if not is_fractional(replica):
        whole = {GPU: str(len(replica.gpus))}
        if sharing == "hami":
            whole.update({GPUMEM_PERCENTAGE: "100", GPUCORES: "100"})
        return whole
    if sharing == "hami":
        return {GPU: "1", GPUMEM: str(share.memory_mib)}
    return {}


def hami_framework_caps(env: dict[str, str]) -> None:
    """HAMi mode, a share: HAMi's CUDA interception answers ``cuMemGetInfo`` with the share's
    ``nvidia.com/gpumem`` as the GPU's total (HAMi-core's ``cuMemGetInfo_v2``), so JAX, which
    takes ``XLA_PYTHON_CLIENT_MEM_FRACTION`` of that total, gets all of it: the share's own
    fraction would cap the share a second time (a quarter of a quarter). Torch needs nothing:
    FracHub's hook caps it at the share's bytes of the total torch sees, the whole of it here.
    """
    env["XLA_PYTHON_CLIENT_MEM_FRACTION"] = "1"


def hami_pod_fields(
    settings: PodSettings,
    replicas: Sequence[ReplicaPlacement],
    uuids: Mapping[tuple[str, int], str],
) -> tuple[str, dict[str, str]]:
    """HAMi mode: the schedulerName and annotations of a pod holding ``replicas``' GPUs.

    HAMi's device plugin serves only pods HAMi's scheduler extender placed, so every GPU pod
    names it (its webhook would set it for pods without a schedulerName, but leaves alone any
    other name, and a default-scheduler pod when ``forceOverwriteDefaultScheduler`` is off;
    the default scheduler cannot place ``nvidia.com/gpumem``, which no node advertises).
    ``nvidia.com/use-gpuuuid`` lists the GPUs FracHub chose: HAMi picks each pod's among them
    (one Job's pods share one template, so a group lists all its replicas' GPUs, and each
    whole-GPU pod takes free ones: HAMi never gives a 100 % device twice)."""
    wanted = [(r.node, share.index) for r in replicas for share in r.gpus]
    if settings.sharing != "hami" or not wanted:
        return settings.scheduler_name, {}
    missing = [f"GPU {index} on {node}" for node, index in wanted if not uuids.get((node, index))]
    if missing:
        raise ValueError(
            f"HAMi has not registered {', '.join(missing)} ({HAMI_REGISTER} on the Node)"
        )
    listed = list(dict.fromkeys(uuids[key] for key in wanted))
    return settings.hami_scheduler_name, {HAMI_USE_UUID: ",".join(listed)}


def shares_text(placement: Placement) -> str:
    """``node:index:milli`` for every share, the annotation a restarted backend reads."""
    return ",".join(
        f"{replica.node}:{share.index}:{share.milli}"
        for replica in placement
        for share in replica.gpus
    )


def shares_text_raw(shares: Sequence[tuple[str, int, int]]) -> str:
    return ",".join(f"{node}:{index}:{milli}" for node, index, milli in shares)


def parse_shares(text: str) -> list[tuple[str, int, int]]:
    out = []
    for part in (text or "").split(","):
        if part.count(":") >= 2:
            node, index, milli = part.rsplit(":", 2)
            out.append((node, int(index), int(milli)))
    return out
