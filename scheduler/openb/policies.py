"""Placement scorers for the openb replay, selectable by name.

Every policy answers one question, :meth:`Policy.choose`: given a request and
the mask of nodes where it fits, which node and (for a one-GPU request) which
GPU. Ties between nodes are broken the paper's way, for every policy alike: each
node holds a seeded random rank and the best-ranked node among the best scores
wins (:func:`pick_best`). Policies that cache per-node scores refresh only the
node just placed on (:meth:`Policy.placed`).

The paper's policies (FGD, ATC'23): ``random``, ``dotproduct``, ``gpupacking``,
``bestfit``, ``fgd``, implemented here as its simulator scores them. The engine's
own placements, ``pack`` and ``frachub``, are not reimplemented: :class:`EnginePolicy`
drives the engine's scorer itself.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.engine.fragmentation import FragmentationTable, ScoreKey, target_workload
from scheduler.engine.ledger import Ledger
from scheduler.engine.model import Node as EngineNode
from scheduler.engine.model import Request as EngineRequest
from scheduler.engine.placement import FracHub, place, scorer_named
from scheduler.openb.cluster import ClusterState, Request
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


def _score_keys(requests: Sequence[Request]) -> list[ScoreKey]:
    """FGD's keys: memory plays no part."""
    return sorted({(r.cpu_milli, 0, r.gpu_milli, r.num_gpu) for r in requests})


class FgdPolicy(Policy):
    """Fragmentation Gradient Descent (Weng et al., ATC'23), as its simulator scores it.

    The target workload is the most frequent request shapes (CPU, GPU share,
    GPU count, models) covering 95% of the pod list. A node's score is the
    paper's ``int(100 * sigmoid((F_before - F_after) / 1000))``: the integer
    cut makes many nodes tie, and the tie goes to the best node rank. Inside the
    node the GPU with the least fragmentation growth wins (the tightest among equals).
    """

    name = "fgd"

    def __init__(
        self,
        state: ClusterState,
        rank: np.ndarray,
        rng: random.Random,
        requests: Sequence[Request],
        pods: Sequence[Pod],
    ) -> None:
        super().__init__(state, rank, rng, requests, pods)
        self.workload = target_workload(
            (p.cpu_milli, p.memory_mib, p.gpu_milli, p.num_gpu, p.gpu_spec) for p in pods
        )
        keys = _score_keys(requests)
        self.table = FragmentationTable(self.workload, state.models, keys)
        self.key_index = self.table.key_index
        n = len(state)
        self.delta = np.zeros((len(keys), n))
        self.score = np.zeros((len(keys), n))
        self.pick = np.zeros((len(keys), n), dtype=np.int64)
        for node in range(n):
            self.placed(node)

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
        k = self.key_index[(req.cpu_milli, 0, req.gpu_milli, req.num_gpu)]
        feasible = feasible & np.isfinite(self.delta[k])
        node = pick_best(self.score[k], feasible, self.rank)
        if node < 0 or req.num_gpu != 1:
            return node, -1
        return node, self.state.gpu_with_free(node, int(self.pick[k, node]))


class EnginePolicy(Policy):
    """The engine's own placement (``scheduler.engine.placement``), driven on an engine ledger.

    What the product ships is what the replay measures: the nodes go into an engine
    ``Ledger`` listed in rank order (the engine gives ties to the node listed first, the
    paper's fixed random order), each pod becomes an engine ``Request`` and the engine's
    ``place`` decides. The replay's arrays only mirror the result for its measurements.
    ``frachub`` is given the trace's target workload, as FGD is: the most frequent shapes
    covering 95% of pods, here with memory.
    """

    scorer_name = ""

    def __init__(
        self,
        state: ClusterState,
        rank: np.ndarray,
        rng: random.Random,
        requests: Sequence[Request],
        pods: Sequence[Pod],
    ) -> None:
        super().__init__(state, rank, rng, requests, pods)
        order = [int(n) for n in np.argsort(rank, kind="stable")]
        in_use = []  # whatever the replay's state already holds
        for n in order:
            used = [
                GpuShare(g, GPU_MILLI - int(state.gpu_free[n, g]))
                for g in range(state.nodes[n].gpus)
                if state.gpu_free[n, g] < GPU_MILLI
            ]
            cpu = int(state.cpu_cap[n] - state.cpu_free[n])
            mem = int(state.mem_cap[n] - state.mem_free[n])
            in_use.append(((ReplicaPlacement(str(n), tuple(used)),), cpu, mem))
        self.ledger = Ledger(
            [
                EngineNode(
                    name=str(n),
                    gpus=state.nodes[n].gpus,
                    gpu_model=state.nodes[n].model,
                    cpu_milli=state.nodes[n].cpu_milli,
                    memory_mib=state.nodes[n].memory_mib,
                )
                for n in order
            ],
            in_use,
        )
        scorer = scorer_named(self.scorer_name)
        if isinstance(scorer, FracHub):
            scorer = scorer.with_workload(
                target_workload(
                    ((p.cpu_milli, p.memory_mib, p.gpu_milli, p.num_gpu, p.gpu_spec) for p in pods),
                    with_memory=True,
                )
            )
        self.scorer = scorer
        self.engine_requests = {
            r.id: EngineRequest(
                gpus=r.num_gpu if r.num_gpu != 1 else r.gpu_milli / GPU_MILLI,
                cpu_milli=r.cpu_milli,
                memory_mib=r.memory_mib,
                gpu_models=r.gpu_spec,
            )
            for r in requests
        }

    def choose(self, req: Request, feasible: np.ndarray) -> tuple[int, int]:
        placement = place(self.ledger, self.engine_requests[req.id], self.scorer)
        if placement is None:
            return -1, -1
        (replica,) = placement
        node = int(replica.node)
        gpu = replica.gpus[0].index if req.num_gpu == 1 else -1
        return node, gpu


class PackPolicy(EnginePolicy):
    """The engine's ``pack``: most-used GPU that fits, node with fewest wholly free GPUs."""

    name = scorer_name = "pack"


class FracHubPolicy(EnginePolicy):
    """The engine's ``frachub``: FGD with memory-aware target shapes (FracHub's default)."""

    name = scorer_name = "frachub"


POLICIES: dict[str, type[Policy]] = {
    cls.name: cls
    for cls in (
        RandomPolicy,
        DotProductPolicy,
        GpuPackingPolicy,
        BestFitPolicy,
        FgdPolicy,
        PackPolicy,
        FracHubPolicy,
    )
}
"""Policy classes by CLI name, in the order reports list them."""
