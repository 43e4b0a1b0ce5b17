"""Where a workload's replicas go (docs/scheduling.md, rule 5), as pluggable scorers.

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
- ``frachub``: FGD's fragmentation gradient (Weng et al., ATC'23) with memory-aware
  target shapes, memoised: the spot where the node's expected fragmentation, under
  the request shapes the cluster expects, grows least. The target workload is an
  input (:meth:`FracHub.with_workload`): the trace's in the openb replay, the
  cluster's own recent requests in the service. On openb it leaves less capacity
  stranded than FGD's published figure (docs/benchmarks.md section 1).

Every scorer honours a request's CPU, memory and GPU models (``Ledger.admits``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Protocol

import numpy as np
from sortedcontainers import SortedList

from scheduler.common.limits import MILLI
from scheduler.common.placement import Placement, ReplicaPlacement
from scheduler.engine.fragmentation import MEMO_LIMIT, FragmentationTable, ScoreKey, TaskShape
from scheduler.engine.ledger import Ledger
from scheduler.engine.model import Request


class Scorer(Protocol):
    """Chooses one replica's spot among ``nodes`` (ledger indices; None means every node)."""

    def choose(
        self, ledger: Ledger, request: Request, nodes: Collection[int] | None
    ) -> ReplicaPlacement | None: ...

    def with_workload(self, workload: Sequence[TaskShape]) -> Scorer:
        """This scorer for a target workload (the shapes the cluster expects); scorers that
        do not look ahead return themselves."""
        ...


class _Myopic:
    """Scorers that look at the request alone, not at what the cluster expects next."""

    def with_workload(self, workload: Sequence[TaskShape]) -> Scorer:
        return self  # type: ignore[return-value]


def _fraction_candidates(ledger: Ledger, request: Request, nodes: Iterable[int]):
    """(free before, node, gpu, milli) for every GPU a fractional replica fits on."""
    for n in nodes:
        node = ledger.nodes[n]
        milli = request.milli_on(node.gpu_memory_mib)
        if milli > MILLI or not ledger.admits(n, request):
            continue
        for g, free in enumerate(ledger.free[n]):
            if free >= milli:
                yield free, n, g, milli


def _whole_candidates(ledger: Ledger, request: Request, nodes: Iterable[int]):
    """(wholly free GPUs, node) for every node that can hold a whole-GPU replica."""
    need = request.whole_gpus
    for n in nodes:
        count = ledger.whole_free[n]
        if count >= need and ledger.admits(n, request):
            yield count, n


def _take_whole(ledger: Ledger, n: int, need: int) -> ReplicaPlacement:
    chosen = [g for g, free in enumerate(ledger.free[n]) if free == MILLI][:need]
    return ledger.replica_on(n, [(g, MILLI) for g in chosen])


def _first_host(ledger: Ledger, request: Request, nodes: Iterable[int]) -> ReplicaPlacement | None:
    for n in nodes:
        if ledger.admits(n, request):
            return ledger.replica_on(n, [])
    return None


def _everywhere(ledger: Ledger, nodes: Collection[int] | None) -> Iterable[int]:
    return range(len(ledger.nodes)) if nodes is None else sorted(nodes)


_SCAN_BELOW = 16
"""Restricted to this few nodes, scanning them beats walking the cluster-wide index."""


class Pack(_Myopic):
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
                    if (nodes is None or n in nodes) and ledger.admits(n, request):
                        best = (free, n, g, milli)
                        break
            return None if best is None else ledger.replica_on(best[1], [(best[2], best[3])])
        if request.whole_gpus:
            index = ledger.by_whole
            for _count, n in index.islice(index.bisect_left((request.whole_gpus, -1))):
                if (nodes is None or n in nodes) and ledger.admits(n, request):
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


class Spread(_Myopic):
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
"""What a JupyterHub GPU cluster typically asks for when nobody said otherwise (and before
it has requests of its own): mostly quarter- and half-GPU notebooks and single-GPU jobs, a
few multi-GPU ones."""

_UNTRACKED = 1 << 62
"""Free CPU or memory of a node that does not track them."""


class FracHub:
    """FGD's fragmentation gradient with memory-aware target shapes, memoised (``frachub``).

    The spot where the node's expected fragmentation under the target workload grows
    least (``scheduler.engine.fragmentation``), scored as FGD's simulator does,
    ``int(100 * sigmoid(-growth / 1000))``: the coarse cut makes many nodes tie and the tie
    goes to the node listed first, which packs work onto fewer nodes. Inside the node, the
    GPU whose choice grows fragmentation least, the tightest among equals; whole GPUs are
    the node's first wholly free ones.

    Two changes to FGD, measured on the openb trace (docs/benchmarks.md section 1):

    * **Memory.** FGD describes its target workload by CPU and GPUs only, so a node whose
      memory is nearly gone still looks able to host the typical task. Target shapes that
      carry memory (the replay's, from the trace; the service's, from
      :func:`~scheduler.engine.fragmentation.recent_workload`) make memory-stranded GPUs
      count as fragments.
    * **CPU-only requests.** Their growth is never negative and the integer cut puts any
      growth above zero one step below none; instead every node within
      :attr:`cpu_pod_window` expected milli of the best growth ties, and node order decides.

    Fast because growth depends only on a node's state and the request's key: rows are
    memoised by state (:class:`~scheduler.engine.fragmentation.FragmentationTable`), each
    ledger keeps a column of growths per request key, and only the nodes its journal says
    changed are rescored before one vectorised choice.
    """

    name = "frachub"
    cpu_pod_window = 10.0
    """CPU-only requests: nodes whose growth is within this many expected milli of the best tie."""

    def __init__(self, workload: Sequence[TaskShape] = DEFAULT_SHAPES) -> None:
        self.workload = tuple(workload) or DEFAULT_SHAPES
        self.table = FragmentationTable(self.workload)

    def with_workload(self, workload: Sequence[TaskShape]) -> FracHub:
        """This scorer for another target workload (itself, memo and all, when unchanged)."""
        workload = tuple(workload) or DEFAULT_SHAPES
        return self if workload == self.workload else FracHub(workload)

    def prepare(self, ledger: Ledger) -> None:
        """Bring this ledger's columns up to date for every request key met so far.

        For a ledger kept between cycles (``Standing``): each cycle's copy then starts from
        current columns instead of scoring every node for every key again."""
        columns = self._columns(ledger)
        for key in list(self.table.keys):
            columns.column(key)

    def _columns(self, ledger: Ledger) -> _Columns:
        columns = ledger.scratch.get(self)
        if not isinstance(columns, _Columns):
            columns = _Columns(self.table, ledger)
            ledger.scratch[self] = columns
        columns.refresh(ledger)
        return columns

    def choose(
        self, ledger: Ledger, request: Request, nodes: Collection[int] | None
    ) -> ReplicaPlacement | None:
        columns = self._columns(ledger)
        if request.whole_gpus:
            n = columns.best((MILLI, request.whole_gpus), request, ledger, nodes)
            return None if n is None else _take_whole(ledger, n, request.whole_gpus)
        if request.is_fraction and request.gpu_memory_mib is None:
            shape = (request.milli_on(0), 1)
            n = columns.best(shape, request, ledger, nodes)
            if n is None:
                return None
            g = ledger.free[n].index(columns.pick(shape, request, n))
            return ledger.replica_on(n, [(g, request.milli_on(ledger.nodes[n].gpu_memory_mib))])
        if request.is_fraction:
            delta, pick = columns.fraction_growth(request)
        else:
            delta, pick = columns.growth((0, 0), request)
        # Growth is a difference of float sums: no growth may come out as +-1e-13, which
        # would put a node on either side of the sigmoid's cut at 0. Micro-milli is noise.
        delta = np.round(delta, 6)
        ok = np.isfinite(delta) & (columns.cpu >= request.cpu_milli)
        ok &= columns.mem >= request.memory_mib
        if request.gpu_models:
            ok &= columns.model_mask(ledger, request.gpu_models)
        if nodes is not None:
            within = np.zeros(len(ledger.nodes), dtype=bool)
            within[list(nodes)] = True
            ok &= within
        if not ok.any():
            return None
        if request.is_fraction:
            n = int(np.argmin(np.where(ok, _score(delta), np.inf)))
            g = ledger.free[n].index(int(pick[n]))
            return ledger.replica_on(n, [(g, request.milli_on(ledger.nodes[n].gpu_memory_mib))])
        growth = np.where(ok, delta, np.inf)
        n = int(np.argmax(growth <= growth.min() + self.cpu_pod_window))
        return ledger.replica_on(n, [])


def _score(delta: np.ndarray) -> np.ndarray:
    """FGD's score, lower is better: ``-int(100 * sigmoid(-growth / 1000))`` of growth
    rounded to micro-milli (no growth may come out as +-1e-13 on either side of the cut)."""
    with np.errstate(over="ignore"):
        return -np.floor(100.0 / (1.0 + np.exp(np.round(delta, 6) / 1000.0)))


class _Columns:
    """One ledger's fragmentation growth per node, one column per request key, kept current.

    ``cpu``/``mem`` mirror the ledger's free CPU and memory as arrays; each column holds,
    per node, the growth (``inf`` where its GPUs cannot host the key) and the free milli of
    the GPU to take. Nodes the ledger changed since the last look are rescored lazily.
    """

    def __init__(self, table: FragmentationTable, ledger: Ledger) -> None:
        self.table = table
        self.seen = len(ledger.watch())
        count = len(ledger.nodes)
        self.model = [table.model_index(node.gpu_model) for node in ledger.nodes]
        self.memory = np.array([node.gpu_memory_mib for node in ledger.nodes], dtype=np.int64)
        self.cpu = np.array(
            [_UNTRACKED if c is None else c for c in ledger.cpu_free], dtype=np.int64
        ).reshape(count)
        self.mem = np.array(
            [_UNTRACKED if m is None else m for m in ledger.mem_free], dtype=np.int64
        ).reshape(count)
        cpu, mem = self.cpu.tolist(), self.mem.tolist()
        self.state: list[tuple[list[int], int, int, int]] = [
            (list(ledger.free[n]), cpu[n], mem[n], self.model[n]) for n in range(count)
        ]
        self.columns: dict[ScoreKey, tuple[np.ndarray, np.ndarray]] = {}
        self.stale: dict[ScoreKey, set[int]] = {}
        self.rows: list[tuple[list[float], list[int]] | None] = [None] * count
        """Per node: the table's row for its current state as lists (every key's column
        reads it, so it is looked up once per change, not once per key)."""
        self._models: dict[frozenset[str], np.ndarray] = {}
        self.scores: dict[ScoreKey, np.ndarray] = {}
        """Per key and node: FGD's score (``_score``) of the node's growth."""
        self.ranked: dict[ScoreKey, SortedList] = {}
        """Per key: (score, node) of every node whose GPUs can host it, best first; the
        choice is the first entry that passes the host checks, not a pass over every node."""
        self._score_cache: dict[float, float] = {}
        """Growth -> score, computed by ``_score`` once per value (elementwise, so the same
        value scores the same alone or in a column)."""
        self._owned: set[ScoreKey] = set()
        """Keys whose ranking this object may change in place (the others are shared with a
        copy and are copied before their first change)."""

    def copy_for(self, ledger: Ledger, twin: Ledger) -> _Columns:
        """The same columns for ``twin``, a fresh copy of ``ledger``."""
        self.refresh(ledger)
        other = object.__new__(_Columns)
        other.__dict__.update(self.__dict__)
        other.seen = 0
        other.cpu, other.mem = self.cpu.copy(), self.mem.copy()
        other.state = list(self.state)
        other.rows = list(self.rows)
        other.columns = {key: (d.copy(), p.copy()) for key, (d, p) in self.columns.items()}
        other.stale = {key: set(nodes) for key, nodes in self.stale.items()}
        other.scores = {key: score.copy() for key, score in self.scores.items()}
        other.ranked = dict(self.ranked)
        self._owned = set()
        other._owned = set()
        return other

    def rebase(self, ledger: Ledger) -> None:
        """Read the ledger's journal to its end; the ledger is about to clear it."""
        self.refresh(ledger)
        self.seen = 0

    def _read(self, ledger: Ledger, n: int) -> tuple[list[int], int, int, int]:
        cpu, mem = ledger.cpu_free[n], ledger.mem_free[n]
        cpu = _UNTRACKED if cpu is None else cpu
        mem = _UNTRACKED if mem is None else mem
        self.cpu[n], self.mem[n] = cpu, mem
        return (list(ledger.free[n]), cpu, mem, self.model[n])

    def refresh(self, ledger: Ledger) -> None:
        journal = ledger.watch()
        if self.seen == len(journal):
            return
        changed = set()
        for n in set(journal[self.seen :]):
            state = self._read(ledger, n)
            if state != self.state[n]:  # else a trial change was rolled back
                self.state[n] = state
                self.rows[n] = None
                changed.add(n)
        self.seen = len(journal)
        if changed:
            for nodes in self.stale.values():
                nodes |= changed

    def model_mask(self, ledger: Ledger, models: frozenset[str]) -> np.ndarray:
        mask = self._models.get(models)
        if mask is None:
            mask = np.array([node.gpu_model in models for node in ledger.nodes], dtype=bool)
            self._models[models] = mask
        return mask

    def growth(self, shape: tuple[int, int], request: Request) -> tuple[np.ndarray, np.ndarray]:
        """(growth, pick) per node for ``shape`` = (milli per GPU, GPU count) of ``request``."""
        return self.column(self.table.normal((request.cpu_milli, request.memory_mib, *shape)))

    def column(self, key: ScoreKey) -> tuple[np.ndarray, np.ndarray]:
        """(growth, pick) per node for a request key, brought up to date."""
        column = self.columns.get(key)
        if column is None:
            self.table.add_keys([key])
            count = len(self.state)
            column = (np.empty(count), np.empty(count, dtype=np.int64))
            self.columns[key] = column
            self._rescore(key, column, range(count), fresh=True)
        elif self.stale[key]:
            self._rescore(key, column, self.stale[key], fresh=False)
        self.stale[key] = set()
        return column

    def _rescore(
        self,
        key: ScoreKey,
        column: tuple[np.ndarray, np.ndarray],
        todo: Iterable[int],
        fresh: bool,
    ) -> None:
        k = self.table.key_index[key]
        delta, pick = column
        row = self._row
        if fresh:
            for n in todo:
                row_delta, row_pick = row(n, k)
                delta[n], pick[n] = row_delta[k], row_pick[k]
            score = self.scores[key] = _score(delta)
            finite = np.isfinite(delta)
            self.ranked[key] = SortedList(
                zip(score[finite].tolist(), np.flatnonzero(finite).tolist(), strict=True)
            )
            self._owned.add(key)
            return
        score = self.scores[key]
        if key not in self._owned:
            self.ranked[key] = self.ranked[key].copy()
            self._owned.add(key)
        ranked = self.ranked[key]
        cache = self._score_cache
        rows, state, row_lists = self.rows, self.state, self.table.row_lists
        for n in todo:
            cached = rows[n]  # ``_row``, inlined: this loop runs for every change and key
            if cached is None or len(cached[0]) <= k:
                cached = rows[n] = row_lists(*state[n])
            value, was = cached[0][k], float(delta[n])
            pick[n] = cached[1][k]
            if value == was:
                continue  # a trial change rolled back: the same growth, the same rank
            delta[n] = value
            if math.isfinite(was):
                ranked.remove((float(score[n]), n))
            if math.isfinite(value):
                new = cache.get(value)
                if new is None:
                    if len(cache) >= MEMO_LIMIT:
                        cache.clear()
                    new = cache[value] = float(_score(np.array([value]))[0])
                score[n] = new
                ranked.add((new, n))

    def _row(self, n: int, k: int) -> tuple[list[float], list[int]]:
        """Node ``n``'s row (at least ``k + 1`` keys long), from the table once per state."""
        cached = self.rows[n]
        if cached is None or len(cached[0]) <= k:
            cached = self.rows[n] = self.table.row_lists(*self.state[n])
        return cached

    def best(
        self,
        shape: tuple[int, int],
        request: Request,
        ledger: Ledger,
        nodes: Collection[int] | None,
    ) -> int | None:
        """The node with the best score for ``shape`` (the first listed among equals) that
        passes the host checks and is among ``nodes``; None if there is none."""
        key = self.table.normal((request.cpu_milli, request.memory_mib, *shape))
        self.column(key)
        cpu_need, mem_need, models = request.cpu_milli, request.memory_mib, request.gpu_models
        state = self.state  # (free, cpu, mem, model): the same CPU and memory as the arrays

        def fits(n: int) -> bool:
            _, cpu, mem, _ = state[n]
            return (
                cpu >= cpu_need
                and mem >= mem_need
                and (not models or ledger.nodes[n].gpu_model in models)
            )

        if nodes is not None and len(nodes) < _SCAN_BELOW:
            delta, score = self.columns[key][0], self.scores[key]
            isfinite = math.isfinite
            found = [(score[n], n) for n in nodes if isfinite(delta[n]) and fits(n)]
            return min(found)[1] if found else None
        for _, n in self.ranked[key]:
            if (nodes is None or n in nodes) and fits(n):
                return n
        return None

    def pick(self, shape: tuple[int, int], request: Request, n: int) -> int:
        """The free milli of the GPU to take on node ``n`` (after ``best`` chose it)."""
        key = self.table.normal((request.cpu_milli, request.memory_mib, *shape))
        return int(self.columns[key][1][n])

    def fraction_growth(self, request: Request) -> tuple[np.ndarray, np.ndarray]:
        """Growth of a fractional request; sized by memory, its share differs per GPU size."""
        if request.gpu_memory_mib is None:
            return self.growth((request.milli_on(0), 1), request)
        delta = np.full(len(self.state), np.inf)
        pick = np.full(len(self.state), -1, dtype=np.int64)
        for memory in np.unique(self.memory).tolist():
            milli = request.milli_on(memory)
            if milli > MILLI:
                continue
            d, p = self.growth((milli, 1), request)
            mine = self.memory == memory
            delta[mine], pick[mine] = d[mine], p[mine]
        return delta, pick


SCORERS: dict[str, Callable[[], Scorer]] = {
    "pack": Pack,
    "spread": Spread,
    "frachub": FracHub,
}


def scorer_named(name: str) -> Scorer:
    """The scorer registered under ``name``; the message lists the valid ones."""
    try:
        return SCORERS[name]()
    except KeyError:
        raise ValueError(
            f"unknown placement {name!r}; choose one of: {', '.join(sorted(SCORERS))}"
        ) from None


def choose(
    ledger: Ledger,
    request: Request,
    scorer: Scorer,
    nodes: Collection[int] | None = None,
    account: str | None = None,
) -> ReplicaPlacement | None:
    """The scorer's spot for one replica of ``account``'s work, never a share of a GPU that
    another account's work shares on a node that serves one account per GPU
    (``Node.one_account_per_gpu``): such GPUs are filled for the question only, and asked
    again. Costs nothing more when no node has the rule."""
    replica = scorer.choose(ledger, request, nodes)
    if replica is None or ledger.accounts is None or account is None:
        return replica
    mark = ledger.mark()
    while replica is not None and ledger.other_account(replica, account) is not None:
        n = ledger.index[replica.node]
        for share in replica.gpus:
            rest = ledger.free[n][share.index]
            if rest > 0:
                ledger.take((ledger.replica_on(n, [(share.index, rest)]),))
        replica = scorer.choose(ledger, request, nodes)
    ledger.rollback(mark)
    return replica


def place(
    ledger: Ledger,
    request: Request,
    scorer: Scorer,
    nodes: Collection[int] | None = None,
    account: str | None = None,
) -> Placement | None:
    """Place every replica, taking the capacity on the ledger, or change nothing and return None.

    Gang replicas try the topology domain (same labels) of the first replica's best spot first,
    then every other domain in node order, then the whole cluster (or ``nodes``). ``account``
    is the workload's user, for nodes that serve one account per GPU (``choose``).
    """
    if request.replicas > 1 and not _may_hold(ledger, request, nodes):
        return None
    mark = ledger.mark()
    first = choose(ledger, request, scorer, nodes, account)
    if first is None:
        return None
    if request.replicas == 1:
        ledger.take((first,), request.cpu_milli, request.memory_mib, account)
        return (first,)
    domains = _domains(ledger, nodes)
    first_domain = _domain_of(ledger, ledger.index[first.node])
    order = [first_domain] + [d for d in domains if d != first_domain]
    if nodes is None and ledger.domain_sets is not None:
        sets = ledger.domain_sets  # filled by ``_domains``; read-only, shared
        attempts: list[Collection[int] | None] = [sets[d] for d in order]
    else:
        attempts = [set(domains[d]) for d in order]
    if len(domains) > 1:
        attempts.append(nodes)
    for attempt in attempts:
        placed = _place_all(ledger, request, scorer, attempt, account)
        if placed is not None:
            return placed
        ledger.rollback(mark)
    return None


def _may_hold(ledger: Ledger, request: Request, nodes: Collection[int] | None) -> bool:
    """Cheap necessary test before a whole-GPU gang's search: enough wholly free GPUs, in
    whole replicas per node, for every replica.

    A victim search asks whether the gang fits after each trial eviction and again for each
    victim it gives back; at 500 replicas each failed question placed up to 500 replicas
    before failing, so one 500-node decision cost seconds. This test only says no where the
    search would fail, so it changes no decision.

    Over the whole cluster the per-node sum is read from ``Ledger.whole_counts`` (nodes per
    count of wholly free GPUs) in at most a GPU count's steps: node by node, a refusal walked
    every node, and the 4,000-node burst cycle's 3,300 gang questions spent 0.45 s on it."""
    per_replica = request.whole_gpus
    if per_replica == 0:
        return True
    if ledger.total_free < request.replicas * per_replica * MILLI:
        return False
    short = request.replicas
    if nodes is None:
        counts = ledger.whole_counts
        for free in range(len(counts) - 1, per_replica - 1, -1):
            short -= (free // per_replica) * counts[free]
            if short <= 0:
                return True
        return False
    whole = ledger.whole_free
    for n in nodes:
        short -= whole[n] // per_replica
        if short <= 0:
            return True
    return False


def _place_all(
    ledger: Ledger,
    request: Request,
    scorer: Scorer,
    nodes: Collection[int] | None,
    account: str | None,
) -> Placement | None:
    placed: list[ReplicaPlacement] = []
    for _ in range(request.replicas):
        replica = None
        if request.is_fraction and placed:
            replica = _choose_apart(ledger, request, scorer, nodes, placed, account)
        if replica is None:
            replica = choose(ledger, request, scorer, nodes, account)
        if replica is None:
            return None
        ledger.take((replica,), request.cpu_milli, request.memory_mib, account)
        placed.append(replica)
    return tuple(placed)


def _choose_apart(
    ledger: Ledger,
    request: Request,
    scorer: Scorer,
    nodes: Collection[int] | None,
    placed: Sequence[ReplicaPlacement],
    account: str | None,
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
    choice = choose(ledger, request, scorer, nodes, account)
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
            ledger.domain_sets = {d: frozenset(ns) for d, ns in ledger.domains.items()}
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
