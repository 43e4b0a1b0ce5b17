"""The cluster's free capacity during one cycle, with trial changes that can be undone.

Actions try things ("evict these three, then place the claimant") and keep them
only if the whole attempt works, as KAI's Statement does: ``mark()`` returns a
point to come back to and ``rollback(mark)`` undoes everything after it.

Two sorted indexes keep placement cheap on large clusters: every GPU with free
capacity as ``(free milli, node, gpu)`` per GPU memory size, and every node as
``(wholly free GPUs, node)``. "The most-used GPU that still fits 250 milli" is
then one bisection instead of a scan over every GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sortedcontainers import SortedList

from scheduler.common.limits import MILLI
from scheduler.common.placement import GpuShare, Placement, ReplicaPlacement
from scheduler.engine.model import Node, Request

Holding = tuple[Placement, int, int]
"""A placement with the CPU milli and memory MiB each replica holds."""


class Ledger:
    """Free GPU milli per GPU, free CPU and memory per node; node order is the tie-break."""

    def __init__(
        self,
        nodes: Sequence[Node],
        taken: Iterable[Holding] = (),
        accounts: Iterable[tuple[Placement, str | None]] = (),
    ) -> None:
        """``accounts``: the account (user) of each placement in ``taken``, read only where
        a node has ``one_account_per_gpu``."""
        self.nodes = tuple(nodes)
        self.index = {node.name: i for i, node in enumerate(self.nodes)}
        self.free = [[MILLI] * node.gpus for node in self.nodes]
        self.cpu_free = [node.cpu_milli for node in self.nodes]
        self.mem_free = [node.memory_mib for node in self.nodes]
        self.total_free = MILLI * sum(node.gpus for node in self.nodes)
        for placement, cpu, mem in taken:  # bulk load: indexes are built once, afterwards
            for replica in placement:
                n = self.index[replica.node]
                for share in replica.gpus:
                    self.free[n][share.index] -= share.milli
                    self.total_free -= share.milli
                if self.cpu_free[n] is not None:
                    self.cpu_free[n] -= cpu
                if self.mem_free[n] is not None:
                    self.mem_free[n] -= mem
        self.whole_free = [gpus.count(MILLI) for gpus in self.free]
        self.whole_counts = [0] * (max((node.gpus for node in self.nodes), default=0) + 1)
        """How many nodes have each number of wholly free GPUs (index: the number), kept with
        ``whole_free`` (speed only: a gang's room test reads it in a few steps, not per node)."""
        for whole in self.whole_free:
            self.whole_counts[whole] += 1
        self.by_memory: dict[int, SortedList] = {}
        for node in self.nodes:
            if node.gpus:
                self.by_memory.setdefault(node.gpu_memory_mib, SortedList())
        for n, node in enumerate(self.nodes):
            if node.gpus:
                self.by_memory[node.gpu_memory_mib].update(
                    (free, n, g) for g, free in enumerate(self.free[n]) if free > 0
                )
        self.by_whole = SortedList(
            (self.whole_free[n], n) for n, node in enumerate(self.nodes) if node.gpus
        )
        self._indexed_free = [list(gpus) for gpus in self.free]
        self._indexed_whole = list(self.whole_free)
        self._own_free = set(range(len(self.nodes)))
        self._own_indexed = set(self._own_free)
        """Nodes whose ``free`` / ``_indexed_free`` list this ledger may change in place; a
        copy shares the others and copies a node's list before its first change."""
        self._dirty: set[int] = set()
        self.shapes = frozenset((node.gpus, node.gpu_memory_mib) for node in self.nodes)
        self.models = frozenset(node.gpu_model for node in self.nodes if node.gpus)
        self.model_shapes = frozenset(
            (node.gpu_model, node.gpus, node.gpu_memory_mib) for node in self.nodes
        )
        self.domains: dict[tuple[tuple[str, str], ...], list[int]] | None = None
        """Nodes grouped by identical labels (topology domains), filled in by placement."""
        self.domain_sets: dict[tuple[tuple[str, str], ...], frozenset[int]] | None = None
        """The same as sets, filled in with ``domains`` (speed only: a gang's placement tries
        each domain by membership, and building a set of thousands of nodes per gang was 1%
        of a 4,000-node cycle)."""
        self.one_account = frozenset(
            n for n, node in enumerate(self.nodes) if node.one_account_per_gpu
        )
        self.accounts: dict[tuple[int, int], dict[str, int]] | None = None
        """Per shared GPU of a ``one_account_per_gpu`` node: its holders' accounts, counted;
        None when no node has the rule (it then costs nothing)."""
        if self.one_account:
            self.accounts = {}
            for placement, account in accounts:
                for replica in placement:
                    self._count_account(1, replica, account)
        self._log: list[tuple[int, ReplicaPlacement, int, int, str | None]] = []
        self.journal: list[int] | None = None
        """Every node index a change touched, in order, once a scorer asked for it (``watch``)."""
        self.scratch: dict[object, object] = {}
        """Per-ledger caches of scorers, keyed by the scorer."""

    def watch(self) -> list[int]:
        """Start (or continue) recording which nodes change; scorers that cache per node read it."""
        if self.journal is None:
            self.journal = []
        return self.journal

    def copy(self) -> Ledger:
        """An independent ledger in the same state (the undo log starts empty)."""
        self.sync()
        twin = object.__new__(Ledger)
        twin.nodes, twin.index, twin.shapes = self.nodes, self.index, self.shapes
        twin.models, twin.model_shapes = self.models, self.model_shapes
        twin.domains, twin.domain_sets = self.domains, self.domain_sets
        twin.one_account = self.one_account
        twin.accounts = (
            None if self.accounts is None else {k: dict(v) for k, v in self.accounts.items()}
        )
        twin.free = list(self.free)
        twin.cpu_free = list(self.cpu_free)
        twin.mem_free = list(self.mem_free)
        twin.total_free = self.total_free
        twin.whole_free = list(self.whole_free)
        twin.whole_counts = list(self.whole_counts)
        twin.by_memory = {memory: index.copy() for memory, index in self.by_memory.items()}
        twin.by_whole = self.by_whole.copy()
        twin._indexed_free = list(self._indexed_free)
        twin._indexed_whole = list(self._indexed_whole)
        self._own_free, self._own_indexed = set(), set()  # both copy a node's list on change
        twin._own_free, twin._own_indexed = set(), set()
        twin._dirty = set()
        twin._log = []
        twin.journal = None if self.journal is None else []
        twin.scratch = {}
        for owner, cache in self.scratch.items():
            twin.scratch[owner] = cache.copy_for(self, twin)  # type: ignore[attr-defined]
        return twin

    def compact(self) -> None:
        """Forget the undo log and, once every scorer cache has read it, the change journal:
        a ledger kept from cycle to cycle (``Standing``) would otherwise grow both forever."""
        self._log.clear()
        if self.journal:
            for cache in self.scratch.values():
                cache.rebase(self)  # type: ignore[attr-defined]
            self.journal.clear()

    # -- trial changes --------------------------------------------------------------------

    def mark(self) -> int:
        return len(self._log)

    def rollback(self, mark: int) -> None:
        while len(self._log) > mark:
            sign, replica, cpu, mem, account = self._log.pop()
            self._apply(-sign, replica, cpu, mem)
            if self.accounts is not None:
                self._count_account(-sign, replica, account)

    def take(
        self,
        placement: Placement,
        cpu_milli: int = 0,
        memory_mib: int = 0,
        account: str | None = None,
    ) -> None:
        """Hold ``placement``; ``account`` is its workload's user (one account per GPU)."""
        self._change(1, placement, cpu_milli, memory_mib, account)

    def give_back(
        self,
        placement: Placement,
        cpu_milli: int = 0,
        memory_mib: int = 0,
        account: str | None = None,
    ) -> None:
        self._change(-1, placement, cpu_milli, memory_mib, account)

    def _change(
        self, sign: int, placement: Placement, cpu: int, mem: int, account: str | None
    ) -> None:
        for replica in placement:
            if sign < 0 and replica.node not in self.index:
                continue  # the node is gone; nothing to give back
            self._apply(sign, replica, cpu, mem)
            if self.accounts is not None:
                self._count_account(sign, replica, account)
            self._log.append((sign, replica, cpu, mem, account))

    def _count_account(self, sign: int, replica: ReplicaPlacement, account: str | None) -> None:
        """Count (or uncount) ``account`` among the holders of the replica's shared GPUs."""
        n = self.index.get(replica.node)
        if account is None or n not in self.one_account:
            return
        assert self.accounts is not None
        for share in replica.gpus:
            if share.milli >= MILLI:
                continue  # a whole GPU is nobody's to share
            key = (n, share.index)
            holders = self.accounts.setdefault(key, {})
            left = holders.get(account, 0) + sign
            if left > 0:
                holders[account] = left
            else:
                holders.pop(account, None)
                if not holders:
                    del self.accounts[key]

    def other_account(self, replica: ReplicaPlacement, account: str | None) -> str | None:
        """Another account holding a share of a GPU ``replica`` would share, where the node
        serves one account per GPU; None when the replica may go there."""
        if self.accounts is None or account is None:
            return None
        n = self.index[replica.node]
        if n not in self.one_account:
            return None
        for share in replica.gpus:
            if share.milli < MILLI:
                for holder in self.accounts.get((n, share.index), ()):
                    if holder != account:
                        return holder
        return None

    def _apply(self, sign: int, replica: ReplicaPlacement, cpu: int, mem: int) -> None:
        """Change the plain arrays only; the sorted indexes catch up in ``sync`` when asked.

        Trial evictions touch a node many times and are mostly rolled back, so keeping the
        indexes lazy makes a trial step a few list updates instead of sorted-list surgery.
        """
        n = self.index[replica.node]
        if n not in self._own_free:
            self.free[n] = list(self.free[n])
            self._own_free.add(n)
        gpus = self.free[n]
        whole = 0
        for share in replica.gpus:
            before = gpus[share.index]
            after = before - sign * share.milli
            gpus[share.index] = after
            whole += (after == MILLI) - (before == MILLI)
            self.total_free -= sign * share.milli
        if whole:
            counts = self.whole_counts
            counts[self.whole_free[n]] -= 1
            self.whole_free[n] += whole
            counts[self.whole_free[n]] += 1
        if self.cpu_free[n] is not None:
            self.cpu_free[n] -= sign * cpu
        if self.mem_free[n] is not None:
            self.mem_free[n] -= sign * mem
        self._dirty.add(n)
        if self.journal is not None:
            self.journal.append(n)

    def sync(self) -> None:
        """Bring the sorted indexes up to date with the arrays (only for nodes that changed)."""
        for n in self._dirty:
            indexed, now = self._indexed_free[n], self.free[n]
            if indexed != now:
                if n not in self._own_indexed:
                    indexed = self._indexed_free[n] = list(indexed)
                    self._own_indexed.add(n)
                fractions = self.by_memory[self.nodes[n].gpu_memory_mib]
                for g, (before, after) in enumerate(zip(indexed, now, strict=True)):
                    if before != after:
                        if before > 0:
                            fractions.remove((before, n, g))
                        if after > 0:
                            fractions.add((after, n, g))
                        indexed[g] = after
            if self._indexed_whole[n] != self.whole_free[n]:
                self.by_whole.remove((self._indexed_whole[n], n))
                self.by_whole.add((self.whole_free[n], n))
                self._indexed_whole[n] = self.whole_free[n]
        self._dirty.clear()

    # -- questions ------------------------------------------------------------------------

    def host_fits(self, n: int, cpu_milli: int, memory_mib: int) -> bool:
        cpu, mem = self.cpu_free[n], self.mem_free[n]
        return (cpu is None or cpu >= cpu_milli) and (mem is None or mem >= memory_mib)

    def shapes_for(self, request: Request) -> frozenset[tuple[int, int]]:
        """(GPU count, GPU memory MiB) of the nodes whose GPU model ``request`` may use."""
        if not request.gpu_models:
            return self.shapes
        return frozenset(
            (gpus, memory)
            for model, gpus, memory in self.model_shapes
            if model in request.gpu_models
        )

    def admits(self, n: int, request: Request) -> bool:
        """Node ``n`` has the CPU and memory a replica needs, and a GPU model it may use."""
        return self.host_fits(n, request.cpu_milli, request.memory_mib) and (
            not request.gpu_models or self.nodes[n].gpu_model in request.gpu_models
        )

    def most_whole_free(self) -> int:
        self.sync()
        return self.by_whole[-1][0] if self.by_whole else 0

    def most_free_on_one_gpu(self) -> int:
        self.sync()
        return max((index[-1][0] for index in self.by_memory.values() if index), default=0)

    def replica_on(self, n: int, shares: Sequence[tuple[int, int]]) -> ReplicaPlacement:
        return ReplicaPlacement(
            self.nodes[n].name, tuple(GpuShare(index, milli) for index, milli in shares)
        )
