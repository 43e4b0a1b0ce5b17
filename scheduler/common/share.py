"""The share of a GPU one replica holds, in the units every enforcer of it takes.

The engine counts a share in thousandths of a GPU (``milli``). Everything downstream needs
it as memory too: the PyTorch and JAX caps, MPS's pinned memory limit, HAMi's ``gpumem``,
the environment contract, the memory watchdog, the API. They all take it from ``share_of``,
so a share is rounded once, by one rule:

    memory_mib = milli * gpu_memory_mib // 1000   (whole MiB, rounded down)

Rounding down keeps the shares the engine fits on one GPU within its memory (four 0.25
shares of a 143,771 MiB GPU sum to no more than 143,771 MiB, which HAMi checks), and it is
never less than a request made in memory: the engine gives such a request
``milli = ceil(asked * 1000 / gpu_memory_mib)`` (``Request.milli_on``), so
``milli * gpu_memory_mib / 1000 >= asked`` and, ``asked`` being whole MiB, so is its floor.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.common.limits import MILLI
from scheduler.common.placement import ReplicaPlacement

MIB = 1 << 20


@dataclass(frozen=True)
class Share:
    """What one replica may use of each GPU it holds: ``milli`` thousandths of the GPU's
    compute and ``memory_mib`` of its memory. A replica without GPUs holds ``Share(0, 0)``."""

    milli: int
    memory_mib: int

    @property
    def fraction(self) -> float:
        """The share as a fraction of one GPU (1.0 for whole GPUs)."""
        return self.milli / MILLI

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB

    @property
    def is_partial(self) -> bool:
        """Does the replica share its GPU (something to cap), rather than hold it whole?"""
        return 0 < self.milli < MILLI

    @property
    def thread_percentage(self) -> int:
        """The share of the GPU's compute, in whole percent rounded up (MPS's
        ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``): a share never gets less compute than asked."""
        return max(1, min(100, -(-self.milli // 10))) if self.milli else 0

    def framework_fraction(self, seen_total_bytes: int) -> float:
        """The fraction to give a framework's cap (``torch.cuda.set_per_process_memory_fraction``,
        ``XLA_PYTHON_CLIENT_MEM_FRACTION``) so that it allows the share's bytes.

        A framework takes its fraction of the total *it* sees, which is less than NVML's (the
        driver reserves some: 139.8 GiB of an H200's 140.4 GiB), so the share's own fraction
        would cap a job below what it asked for. Rounded up to the next billionth and one
        more, so that the fraction times the total, in floating point and truncated to whole
        bytes as torch and XLA do, is never below the share (and at most a few hundred bytes
        above it). FracHub's start-up hook (``scheduler/backends/pyhook/sitecustomize.py``,
        which cannot import this module) repeats this rule; a test proves they agree.
        """
        if seen_total_bytes <= 0:
            return self.fraction
        if self.memory_bytes >= seen_total_bytes:
            return 1.0
        return min(1.0, (self.memory_bytes * 10**9 // seen_total_bytes + 1) / 10**9)


def share_of(replica: ReplicaPlacement, gpu_memory_mib: int) -> Share:
    """The share ``replica`` holds of each of its GPUs, which have ``gpu_memory_mib`` each.

    A replica holds either one share of one GPU or whole GPUs (the engine never splits a
    replica over partial GPUs), so its first GPU speaks for all of them.
    """
    if not replica.gpus:
        return Share(0, 0)
    milli = min(replica.gpus[0].milli, MILLI)
    return Share(milli, milli * max(0, int(gpu_memory_mib)) // MILLI)
