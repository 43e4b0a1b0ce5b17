"""Placement scorers for the openb replay, selectable by name.

Every policy answers one question, :meth:`Policy.choose`: given a request and
the mask of nodes where it fits, which node and (for a one-GPU request) which
GPU. Ties between nodes are broken the paper's way, for every policy alike: each
node holds a seeded random rank and the best-ranked node among the best scores
wins (:func:`pick_best`). Policies that cache per-node scores refresh only the
node just placed on (:meth:`Policy.placed`).

The paper's policies (docs/benchmarks.md section 1): ``random``, ``dotproduct``,
``gpupacking``, ``bestfit``, ``fgd``. FracHub's own default is ``frachub``
(:class:`FracHubPolicy`).
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from scheduler.engine.fragmentation import TaskShape, target_workload
from scheduler.openb.cluster import ClusterState, Request
from scheduler.openb.fastfrag import FragmentationTable, ScoreKey
from scheduler.openb.trace import GPU_MILLI, MAX_GPUS_PER_NODE, Pod

NORM_CPU_MILLI = 128_000
"""CPU of the largest openb node; the paper's Best-Fit and DotProduct normalise by it."""
NORM_GPU_MILLI = MAX_GPUS_PER_NODE * GPU_MILLI
"""GPUs of the largest openb node, in milli."""


def pick_best(scores: np.ndarray, feasible: np.ndarray, rank: np.ndarray) -> int:
    """Index of the lowest score among feasible nodes, the best (lowest) rank among equals.

    Returns -1 when no node is feasible. Scores must be exactly equal to tie,
    so policies keep them integral where they can.
    """
    masked = np.where(feasible, scores, np.inf)
    best = masked.min()
    if best == np.inf:
        return -1
    return int(np.argmin(np.where(masked == best, rank, rank.size)))


class Policy(ABC):
    """Base class: holds the cluster, the node ranks and the run's random stream."""

    name = ""

    def __init__(
        self,
        state: ClusterState,
        rank: np.ndarray,
        rng: random.Random,
        requests: Sequence[Request],
        pods: Sequence[Pod],
    ) -> None:
        self.state = state
        self.rank = rank
        self.rng = rng

    @abstractmethod
    def choose(self, req: Request, feasible: np.ndarray) -> tuple[int, int]:
        """(node, GPU index) for ``req``; node -1 if nothing fits, GPU -1 if not a one-GPU pod."""

    def placed(self, node: int) -> None:  # noqa: B027 - a hook most policies need not use
        """Called after the state changed on ``node``; cached scores are refreshed here."""

    def _best_fit(self, node: int, req: Request) -> tuple[int, int]:
        if node < 0 or req.num_gpu != 1:
            return node, -1
        return node, self.state.best_fit_gpu(node, req.gpu_milli)


class RandomPolicy(Policy):
    """A uniformly random feasible node, a uniformly random fitting GPU on it."""

    name = "random"

    def choose(self, req: Request, feasible: np.ndarray) -> tuple[int, int]:
        nodes = np.flatnonzero(feasible)
        if nodes.size == 0:
            return -1, -1
        node = int(nodes[self.rng.randrange(nodes.size)])
        if req.num_gpu != 1:
            return node, -1
        gpus = np.flatnonzero(self.state.gpu_free[node] >= req.gpu_milli)
        return node, int(gpus[self.rng.randrange(gpus.size)])


class DotProductPolicy(Policy):
    """Smallest dot product of the node's free (CPU, GPU) with the request, best-fit GPU.

    Both vectors are normalised by the largest node (128 cores, 8 GPUs); the
    score is kept as an exact integer (both sides multiplied out).
    """

    name = "dotproduct"

    def choose(self, req: Request, feasible: np.ndarray) -> tuple[int, int]:
        s = self.state
        scores = (
            s.cpu_free * req.cpu_milli * NORM_GPU_MILLI**2
            + s.gpu_free_total * req.gpu_total_milli * NORM_CPU_MILLI**2
        ).astype(np.float64)
        return self._best_fit(pick_best(scores, feasible, self.rank), req)


class BestFitPolicy(Policy):
    """Least weighted leftover after placement: 0.5 CPU/128 cores + 0.5 GPU/8 GPUs."""

    name = "bestfit"

    def choose(self, req: Request, feasible: np.ndarray) -> tuple[int, int]:
        s = self.state
        # 0.5*a/128000 + 0.5*b/8000, scaled by 2*128000 to stay an exact integer.
        scores = (
            (s.cpu_free - req.cpu_milli)
            + (s.gpu_free_total - req.gpu_total_milli) * (NORM_CPU_MILLI // NORM_GPU_MILLI)
        ).astype(np.float64)
        return self._best_fit(pick_best(scores, feasible, self.rank), req)


class GpuPackingPolicy(Policy):
    """Pack GPUs: reuse partly used GPUs, then partly used nodes, then idle nodes.

    Tier 0: the pod fits a partly used GPU (least leftover on that GPU first).
    Tier 1: the node already has GPU work (least free GPU-milli left on the node
    first). Tier 2: an idle node. CPU-only pods follow tiers 1-2 as well, which
    keeps idle nodes whole.
    """

    name = "gpupacking"

    def choose(self, req: Request, feasible: np.ndarray) -> tuple[int, int]:
        s = self.state
        big = 10 * NORM_GPU_MILLI
        busy = s.gpu_free_total < s.gpus * GPU_MILLI
        tier1 = s.gpu_free_total - req.gpu_total_milli
        scores = np.where(busy, big + tier1, 2 * big).astype(np.float64)
        if req.num_gpu == 1 and req.gpu_milli < GPU_MILLI:
            g = s.gpu_free
            partial = (g < GPU_MILLI) & (g >= req.gpu_milli)
            leftover = np.where(partial, g - req.gpu_milli, big).min(axis=1)
            scores = np.where(leftover < big, leftover, scores)
        node = pick_best(scores, feasible, self.rank)
        if node >= 0 and req.num_gpu == 1:
            return node, s.best_fit_gpu(node, req.gpu_milli)
        return node, -1


def _score_keys(requests: Sequence[Request], with_memory: bool) -> list[ScoreKey]:
    return sorted(
        {
            (r.cpu_milli, r.memory_mib if with_memory else 0, r.gpu_milli, r.num_gpu)
            for r in requests
        }
    )


class FgdPolicy(Policy):
    """Fragmentation Gradient Descent (Weng et al., ATC'23), as its simulator scores it.

    The target workload is the most frequent request shapes (CPU, GPU share,
    GPU count, models) covering 95% of the pod list. A node's score is the
    paper's ``int(100 * sigmoid((F_before - F_after) / 1000))``: the integer
    cut makes many nodes tie, and the tie goes to the best node rank. Inside the
    node the GPU with the least fragmentation growth wins (the tightest among equals).
    """

    name = "fgd"
    with_memory = False
    """Whether target shapes and the fit test include memory (FGD: no)."""

    def __init__(
        self,
        state: ClusterState,
        rank: np.ndarray,
        rng: random.Random,
        requests: Sequence[Request],
        pods: Sequence[Pod],
    ) -> None:
        super().__init__(state, rank, rng, requests, pods)
        self.workload = self.make_workload(pods)
        keys = _score_keys(requests, self.with_memory)
        self.key_index = {key: i for i, key in enumerate(keys)}
        self.table = FragmentationTable(self.workload, state.models, keys)
        n = len(state)
        self.delta = np.zeros((len(keys), n))
        self.score = np.zeros((len(keys), n))
        self.pick = np.zeros((len(keys), n), dtype=np.int64)
        for node in range(n):
            self.placed(node)

    def make_workload(self, pods: Sequence[Pod]) -> tuple[TaskShape, ...]:
        """The target workload this policy measures fragmentation against."""
        return target_workload(
            ((p.cpu_milli, p.memory_mib, p.gpu_milli, p.num_gpu, p.gpu_spec) for p in pods),
            with_memory=self.with_memory,
        )

    @staticmethod
    def node_scores(delta: np.ndarray) -> np.ndarray:
        """Lower is better: minus the paper's ``int(100 * sigmoid(-delta / 1000))``."""
        with np.errstate(over="ignore"):
            sig = 1.0 / (1.0 + np.exp(delta / 1000.0))
        return -np.floor(sig * 100.0)

    def placed(self, node: int) -> None:
        s = self.state
        delta, pick = self.table.row(
            s.gpu_free[node], int(s.cpu_free[node]), int(s.mem_free[node]), int(s.model_idx[node])
        )
        self.delta[:, node] = delta
        self.score[:, node] = self.node_scores(delta)
        self.pick[:, node] = pick

    def choose(self, req: Request, feasible: np.ndarray) -> tuple[int, int]:
        key = (req.cpu_milli, req.memory_mib if self.with_memory else 0, req.gpu_milli, req.num_gpu)
        k = self.key_index[key]
        feasible = feasible & np.isfinite(self.delta[k])
        node = pick_best(self.score[k], feasible, self.rank)
        if node < 0 or req.num_gpu != 1:
            return node, -1
        return node, self.state.gpu_with_free(node, int(self.pick[k, node]))


class FracHubPolicy(FgdPolicy):
    """FracHub's default: FGD whose fragmentation also sees memory, with a CPU-pod window.

    Two changes to :class:`FgdPolicy`, everything else is FGD's:

    * **Memory.** FGD describes its target workload by CPU and GPUs only, so a
      node whose memory is nearly gone still looks able to host the typical
      task: a memory-heavy pod placed there costs nothing in FGD's eyes, and
      the GPUs it strands show up only when later pods fail. FracHub groups the
      target shapes on memory too and tests memory in the fit, so
      memory-stranded GPUs count as fragments.
    * **CPU-only pods.** Their fragmentation growth is never negative, and the
      integer sigmoid cut puts any growth above zero, however small, one step
      below zero growth. FracHub instead ties every node within
      :attr:`cpu_pod_window` expected milli of the best growth and lets the rank
      decide, which packs CPU-only pods by the fixed node order.

    Exact deltas, best-fit or packing tie-breaks for GPU pods were tried and did
    worse: the coarse score plus a fixed node order packs pods onto fewer nodes.
    """

    name = "frachub"
    with_memory = True
    cpu_pod_window: float | None = 10.0
    """CPU-only pods: nodes whose growth is within this many expected milli of the best tie."""

    def choose(self, req: Request, feasible: np.ndarray) -> tuple[int, int]:
        if req.num_gpu or self.cpu_pod_window is None:
            return super().choose(req, feasible)
        k = self.key_index[(req.cpu_milli, req.memory_mib if self.with_memory else 0, 0, 0)]
        delta = np.where(feasible, self.delta[k], np.inf)
        best = delta.min()
        if best == np.inf:
            return -1, -1
        return pick_best(np.zeros(delta.size), delta <= best + self.cpu_pod_window, self.rank), -1


POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (
        RandomPolicy,
        DotProductPolicy,
        GpuPackingPolicy,
        BestFitPolicy,
        FgdPolicy,
        FracHubPolicy,
    )
}
"""Policy classes by CLI name, in the order reports list them."""
