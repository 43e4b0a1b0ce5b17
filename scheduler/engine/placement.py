"""Where a workload's replicas go (SCENARIOS.md rule 5), as pluggable scorers.

A scorer answers one question: the best spot for *one replica* on the current
ledger, or None. ``place`` turns that into a whole gang: replicas prefer nodes
that share the first replica's topology labels, and either every replica finds
a spot or the ledger is left as it was.

Scorers:
- ``pack`` (KAI's gpupack; what ``scenario run`` uses): a fraction goes to the
  GPU with the least free share that still fits it; whole GPUs go to the node
  with the fewest wholly free GPUs that fits. Ties go to the node, then the GPU,
  listed first. Packing keeps whole GPUs whole for the requests that need them.
- ``spread``: the opposite, most free first; for latency-sensitive inference that
  should not share a busy GPU.
- ``frag``: FGD's idea (Weng et al., ATC'23): the spot where the node's expected
  fragmentation, under the request shapes the cluster expects, grows least; ties
  to the node and GPU listed first. On the openb trace this family of placement
  leaves a third less capacity stranded than best-fit (docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Protocol

from scheduler.engine.fragmentation import TaskShape, node_fragmentation
from scheduler.engine.ledger import Ledger
from scheduler.engine.model import MILLI, Placement, ReplicaPlacement, Request


class Scorer(Protocol):
    """Chooses one replica's spot among ``nodes`` (ledger indices; None means every node)."""

    def choose(
        self, ledger: Ledger, request: Request, nodes: Collection[int] | None
    ) -> ReplicaPlacement | None: ...


def _fraction_candidates(ledger: Ledger, request: Request, nodes: Iterable[int]):
    """(free before, node, gpu, milli) for every GPU a fractional replica fits on."""
    for n in nodes:
        node = ledger.nodes[n]
        milli = request.milli_on(node.gpu_memory_mib)
        if milli > MILLI or not ledger.host_fits(n, request.cpu_milli, request.memory_mib):
            continue
        for g, free in enumerate(ledger.free[n]):
            if free >= milli:
                yield free, n, g, milli


def _whole_candidates(ledger: Ledger, request: Request, nodes: Iterable[int]):
    """(wholly free GPUs, node) for every node that can hold a whole-GPU replica."""
    need = request.whole_gpus
    for n in nodes:
        count = ledger.whole_free[n]
        if count >= need and ledger.host_fits(n, request.cpu_milli, request.memory_mib):
            yield count, n


def _take_whole(ledger: Ledger, n: int, need: int) -> ReplicaPlacement:
    chosen = [g for g, free in enumerate(ledger.free[n]) if free == MILLI][:need]
    return ledger.replica_on(n, [(g, MILLI) for g in chosen])


def _first_host(ledger: Ledger, request: Request, nodes: Iterable[int]) -> ReplicaPlacement | None:
    for n in nodes:
        if ledger.host_fits(n, request.cpu_milli, request.memory_mib):
            return ledger.replica_on(n, [])
    return None


def _everywhere(ledger: Ledger, nodes: Collection[int] | None) -> Iterable[int]:
    return range(len(ledger.nodes)) if nodes is None else sorted(nodes)


_SCAN_BELOW = 16
"""Restricted to this few nodes, scanning them beats walking the cluster-wide index."""


class Pack:
    """Most-used first: keeps free capacity together (rule 5's default).

    Walks the ledger's sorted indexes from the smallest free amount that fits, so the first
    entry that passes the node filter and the CPU/memory check is the answer.
    """

    name = "pack"

    def choose(
        self, ledger: Ledger, request: Request, nodes: Collection[int] | None
    ) -> ReplicaPlacement | None:
        if nodes is not None and len(nodes) < _SCAN_BELOW:
            return self._scan(ledger, request, sorted(nodes))
        ledger.sync()
        if request.is_fraction:
            best = None
            for memory, index in ledger.by_memory.items():
                milli = request.milli_on(memory)
                if milli > MILLI:
                    continue
                for free, n, g in index.islice(index.bisect_left((milli, -1, -1))):
                    if best is not None and (free, n, g) >= best[:3]:
                        break
                    if (nodes is None or n in nodes) and ledger.host_fits(
                        n, request.cpu_milli, request.memory_mib
                    ):
                        best = (free, n, g, milli)
                        break
            return None if best is None else ledger.replica_on(best[1], [(best[2], best[3])])
        if request.whole_gpus:
            index = ledger.by_whole
            for _count, n in index.islice(index.bisect_left((request.whole_gpus, -1))):
                if (nodes is None or n in nodes) and ledger.host_fits(
                    n, request.cpu_milli, request.memory_mib
                ):
                    return _take_whole(ledger, n, request.whole_gpus)
            return None
        return _first_host(ledger, request, _everywhere(ledger, nodes))

    @staticmethod
    def _scan(ledger: Ledger, request: Request, nodes: Sequence[int]) -> ReplicaPlacement | None:
        if request.is_fraction:
            best = min(
                _fraction_candidates(ledger, request, nodes),
                default=None,
                key=lambda c: (c[0], c[1], c[2]),
            )
            return None if best is None else ledger.replica_on(best[1], [(best[2], best[3])])
        if request.whole_gpus:
            found = min(_whole_candidates(ledger, request, nodes), default=None)
            return None if found is None else _take_whole(ledger, found[1], request.whole_gpus)
        return _first_host(ledger, request, nodes)


class Spread:
    """Least-used first: each workload gets as quiet a GPU as possible."""

    name = "spread"

    def choose(
        self, ledger: Ledger, request: Request, nodes: Collection[int] | None
    ) -> ReplicaPlacement | None:
        candidates = _everywhere(ledger, nodes)
        if request.is_fraction:
            best = max(
                _fraction_candidates(ledger, request, candidates),
                default=None,
                key=lambda c: (c[0], -c[1], -c[2]),
            )
            return None if best is None else ledger.replica_on(best[1], [(best[2], best[3])])
        if request.whole_gpus:
            best = max(
                _whole_candidates(ledger, request, candidates),
                default=None,
                key=lambda c: (c[0], -c[1]),
            )
            return None if best is None else _take_whole(ledger, best[1], request.whole_gpus)
        return _first_host(ledger, request, candidates)


DEFAULT_SHAPES: tuple[TaskShape, ...] = (
    TaskShape(cpu_milli=0, gpu_milli=250, num_gpu=1, probability=0.30),
    TaskShape(cpu_milli=0, gpu_milli=500, num_gpu=1, probability=0.25),
    TaskShape(cpu_milli=0, gpu_milli=1000, num_gpu=1, probability=0.25),
    TaskShape(cpu_milli=0, gpu_milli=1000, num_gpu=2, probability=0.10),
    TaskShape(cpu_milli=0, gpu_milli=1000, num_gpu=4, probability=0.06),
    TaskShape(cpu_milli=0, gpu_milli=1000, num_gpu=8, probability=0.04),
)
"""What a JupyterHub GPU cluster typically asks for when nobody said otherwise: mostly
quarter- and half-GPU notebooks and single-GPU jobs, a few multi-GPU ones."""

_UNTRACKED = 1 << 62
"""Free CPU or memory of a node that does not track them."""


class Fragmentation:
    """Least growth of expected fragmentation (see ``scheduler.engine.fragmentation``)."""

    name = "frag"

    def __init__(self, shapes: Sequence[TaskShape] = DEFAULT_SHAPES) -> None:
        self.shapes = tuple(shapes)

    def _score(self, ledger: Ledger, n: int, free: Sequence[int], request: Request) -> float:
        node = ledger.nodes[n]
        cpu = ledger.cpu_free[n]
        mem = ledger.mem_free[n]
        cpu = _UNTRACKED if cpu is None else cpu - request.cpu_milli
        mem = _UNTRACKED if mem is None else mem - request.memory_mib
        return node_fragmentation(free, cpu, mem, node.gpu_model, self.shapes)

    def choose(
        self, ledger: Ledger, request: Request, nodes: Collection[int] | None
    ) -> ReplicaPlacement | None:
        best: tuple[float, int, int] | None = None
        chosen: ReplicaPlacement | None = None
        for n in _everywhere(ledger, nodes):
            if not ledger.host_fits(n, request.cpu_milli, request.memory_mib):
                continue
            free = ledger.free[n]
            untouched = Request(replicas=1)
            before = self._score(ledger, n, free, untouched)
            if request.is_fraction:
                milli = request.milli_on(ledger.nodes[n].gpu_memory_mib)
                if milli > MILLI:
                    continue
                for g, left in enumerate(free):
                    if left < milli:
                        continue
                    after = list(free)
                    after[g] -= milli
                    key = (self._score(ledger, n, after, request) - before, n, g)
                    if best is None or key < best:
                        best, chosen = key, ledger.replica_on(n, [(g, milli)])
            elif request.whole_gpus:
                if ledger.whole_free[n] < request.whole_gpus:
                    continue
                replica = _take_whole(ledger, n, request.whole_gpus)
                after = list(free)
                for share in replica.gpus:
                    after[share.index] = 0
                key = (self._score(ledger, n, after, request) - before, n, 0)
                if best is None or key < best:
                    best, chosen = key, replica
            elif best is None:
                best, chosen = (0.0, n, 0), ledger.replica_on(n, [])
        return chosen


SCORERS: dict[str, Callable[[], Scorer]] = {
    "pack": Pack,
    "spread": Spread,
    "frag": Fragmentation,
}


def scorer_named(name: str) -> Scorer:
    """The scorer registered under ``name``; the message lists the valid ones."""
    try:
        return SCORERS[name]()
    except KeyError:
        raise ValueError(
            f"unknown placement {name!r}; choose one of: {', '.join(sorted(SCORERS))}"
        ) from None


def place(
    ledger: Ledger, request: Request, scorer: Scorer, nodes: Collection[int] | None = None
) -> Placement | None:
    """Place every replica, taking the capacity on the ledger, or change nothing and return None.

    Gang replicas try the topology domain (same labels) of the first replica's best spot first,
    then every other domain in node order, then the whole cluster (or ``nodes``).
    """
    mark = ledger.mark()
    first = scorer.choose(ledger, request, nodes)
    if first is None:
        return None
    if request.replicas == 1:
        ledger.take((first,), request.cpu_milli, request.memory_mib)
        return (first,)
    domains = _domains(ledger, nodes)
    first_domain = _domain_of(ledger, ledger.index[first.node])
    order = [first_domain] + [d for d in domains if d != first_domain]
    attempts: list[Collection[int] | None] = [set(domains[d]) for d in order]
    if len(domains) > 1:
        attempts.append(nodes)
    for attempt in attempts:
        placed = _place_all(ledger, request, scorer, attempt)
        if placed is not None:
            return placed
        ledger.rollback(mark)
    return None


def _place_all(
    ledger: Ledger, request: Request, scorer: Scorer, nodes: Collection[int] | None
) -> Placement | None:
    placed: list[ReplicaPlacement] = []
    for _ in range(request.replicas):
        replica = None
        if request.is_fraction and placed:
            replica = _choose_apart(ledger, request, scorer, nodes, placed)
        if replica is None:
            replica = scorer.choose(ledger, request, nodes)
        if replica is None:
            return None
        ledger.take((replica,), request.cpu_milli, request.memory_mib)
        placed.append(replica)
    return tuple(placed)


def _choose_apart(
    ledger: Ledger,
    request: Request,
    scorer: Scorer,
    nodes: Collection[int] | None,
    placed: Sequence[ReplicaPlacement],
) -> ReplicaPlacement | None:
    """A fractional gang's next replica on a GPU none of its replicas holds yet, or None.

    Two ranks on one GPU is NCCL's "duplicate GPU" error and leaves torchrun's LOCAL_RANK
    without a device of its own, so a gang of fractions spreads over GPUs where it can (the
    caller stacks it only when no other GPU fits). The gang's GPUs are filled for the
    question only and given back at once."""
    mark = ledger.mark()
    for replica in placed:
        n = ledger.index[replica.node]
        for share in replica.gpus:
            rest = ledger.free[n][share.index]
            if rest > 0:
                ledger.take((ledger.replica_on(n, [(share.index, rest)]),))
    choice = scorer.choose(ledger, request, nodes)
    ledger.rollback(mark)
    return choice


def _domain_of(ledger: Ledger, n: int) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(ledger.nodes[n].labels.items()))


def _domains(
    ledger: Ledger, nodes: Collection[int] | None
) -> dict[tuple[tuple[str, str], ...], list[int]]:
    if nodes is None:
        if ledger.domains is None:  # node labels never change within a ledger
            ledger.domains = {}
            for n in range(len(ledger.nodes)):
                ledger.domains.setdefault(_domain_of(ledger, n), []).append(n)
        return ledger.domains
    domains: dict[tuple[tuple[str, str], ...], list[int]] = {}
    for n in sorted(nodes):
        domains.setdefault(_domain_of(ledger, n), []).append(n)
    return domains


def fits_somewhere_ever(nodes_gpus: Iterable[tuple[int, int]], request: Request) -> bool:
    """Could one replica fit on an *empty* node of this (GPU count, GPU memory MiB) shape?"""
    for gpus, memory in nodes_gpus:
        if request.is_fraction:
            if gpus >= 1 and request.milli_on(memory) <= MILLI:
                return True
        elif gpus >= request.whole_gpus:
            return True
    return False
