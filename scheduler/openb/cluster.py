"""The replay's mutable cluster: free CPU, memory and per-GPU milli as numpy arrays.

Policies read these arrays to score every node at once; only
:meth:`ClusterState.place` changes them, so policies that cache per-node scores
know that the node just placed on is the only one to rescore.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.openb.trace import GPU_MILLI, MAX_GPUS_PER_NODE, Node, Pod


@dataclass(frozen=True)
class Request:
    """A distinct request shape in a run; pods with equal shapes share one id."""

    id: int
    cpu_milli: int
    memory_mib: int
    gpu_milli: int
    num_gpu: int
    gpu_spec: frozenset[str]

    @property
    def gpu_total_milli(self) -> int:
        return self.gpu_milli * self.num_gpu


def request_key(pod: Pod) -> tuple[int, int, int, int, frozenset[str]]:
    """What makes two pods interchangeable for placement."""
    return (pod.cpu_milli, pod.memory_mib, pod.gpu_milli, pod.num_gpu, pod.gpu_spec)


class ClusterState:
    """Free resources of every node; GPUs beyond a node's count are padded as 0 free.

    Padding with 0 is safe: every GPU request asks for more than 0 milli, and a
    GPU with nothing free adds nothing to any fragmentation sum.
    """

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = list(nodes)
        self.models: list[str] = sorted({n.model for n in self.nodes})
        index = {m: i for i, m in enumerate(self.models)}
        self.model_idx = np.array([index[n.model] for n in self.nodes], dtype=np.int64)
        self.gpus = np.array([n.gpus for n in self.nodes], dtype=np.int64)
        self.cpu_cap = np.array([n.cpu_milli for n in self.nodes], dtype=np.int64)
        self.mem_cap = np.array([n.memory_mib for n in self.nodes], dtype=np.int64)
        self.cpu_free = self.cpu_cap.copy()
        self.mem_free = self.mem_cap.copy()
        slots = np.arange(MAX_GPUS_PER_NODE)[None, :]
        self.gpu_free = np.where(slots < self.gpus[:, None], GPU_MILLI, 0).astype(np.int64)
        self.gpu_free_total = self.gpu_free.sum(axis=1)
        self.max_free = self.gpu_free.max(axis=1)
        self.whole_free = (self.gpu_free == GPU_MILLI).sum(axis=1)
        self.capacity_milli = int(self.gpus.sum()) * GPU_MILLI
        self.used_milli = 0
        self._spec_masks: dict[frozenset[str], np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.nodes)

    def model_mask(self, spec: frozenset[str]) -> np.ndarray:
        """Nodes whose GPU model is allowed by ``spec`` (all nodes when ``spec`` is empty)."""
        mask = self._spec_masks.get(spec)
        if mask is None:
            allowed = np.array([m in spec for m in self.models], dtype=bool)
            mask = allowed[self.model_idx] if spec else np.ones(len(self), dtype=bool)
            self._spec_masks[spec] = mask
        return mask

    def feasible(self, req: Request) -> np.ndarray:
        """Boolean mask of nodes where ``req`` fits now (CPU, memory, model, GPUs)."""
        ok = (self.cpu_free >= req.cpu_milli) & (self.mem_free >= req.memory_mib)
        if req.num_gpu == 0:
            return ok
        ok &= self.model_mask(req.gpu_spec)
        if req.num_gpu == 1:
            return ok & (self.max_free >= req.gpu_milli)
        return ok & (self.whole_free >= req.num_gpu)

    def best_fit_gpu(self, node: int, gpu_milli: int) -> int:
        """The GPU on ``node`` with the least free milli that still fits ``gpu_milli``."""
        row = self.gpu_free[node]
        return int(np.argmin(np.where(row >= gpu_milli, row, GPU_MILLI + 1)))

    def gpu_with_free(self, node: int, free: int) -> int:
        """The first GPU on ``node`` with exactly ``free`` milli free."""
        return int(np.flatnonzero(self.gpu_free[node] == free)[0])

    def place(self, node: int, req: Request, gpu: int = -1) -> None:
        """Commit ``req`` to ``node``; for a sharing pod, on GPU index ``gpu``.

        Multi-GPU pods take the node's first wholly free GPUs: which ones does
        not matter, wholly free GPUs are interchangeable.
        """
        self.cpu_free[node] -= req.cpu_milli
        self.mem_free[node] -= req.memory_mib
        if req.num_gpu == 0:
            return
        row = self.gpu_free[node]
        if req.num_gpu == 1:
            if not 0 <= gpu < MAX_GPUS_PER_NODE or row[gpu] < req.gpu_milli:
                raise ValueError(f"GPU {gpu} on node {node} cannot host {req.gpu_milli} milli")
            row[gpu] -= req.gpu_milli
        else:
            whole = np.flatnonzero(row == GPU_MILLI)[: req.num_gpu]
            row[whole] = 0
        self.gpu_free_total[node] = row.sum()
        self.max_free[node] = row.max()
        self.whole_free[node] = int((row == GPU_MILLI).sum())
        self.used_milli += req.gpu_total_milli
