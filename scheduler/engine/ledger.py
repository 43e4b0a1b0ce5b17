"""The cluster's free capacity during one cycle, with trial changes that can be undone.

Actions try things ("evict these three, then place the claimant") and keep them
only if the whole attempt works, as KAI's Statement does: ``mark()`` returns a
point to come back to and ``rollback(mark)`` undoes everything after it.
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduler.engine.model import MILLI, GpuShare, Node, Placement, ReplicaPlacement


class Ledger:
    """Free GPU milli per GPU, free CPU and memory per node; node order is the tie-break."""

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = tuple(nodes)
        self.index = {node.name: i for i, node in enumerate(self.nodes)}
        self.free = [[MILLI] * node.gpus for node in self.nodes]
        self.cpu_free = [node.cpu_milli for node in self.nodes]
        self.mem_free = [node.memory_mib for node in self.nodes]
        self.whole_free = [node.gpus for node in self.nodes]
        self._log: list[tuple[int, ReplicaPlacement, int, int]] = []

    # -- trial changes --------------------------------------------------------------------

    def mark(self) -> int:
        return len(self._log)

    def rollback(self, mark: int) -> None:
        while len(self._log) > mark:
            sign, replica, cpu, mem = self._log.pop()
            self._apply(-sign, replica, cpu, mem)

    def take(self, placement: Placement, cpu_milli: int = 0, memory_mib: int = 0) -> None:
        for replica in placement:
            self._apply(1, replica, cpu_milli, memory_mib)
            self._log.append((1, replica, cpu_milli, memory_mib))

    def give_back(self, placement: Placement, cpu_milli: int = 0, memory_mib: int = 0) -> None:
        for replica in placement:
            if replica.node not in self.index:
                continue  # the node is gone; nothing to give back
            self._apply(-1, replica, cpu_milli, memory_mib)
            self._log.append((-1, replica, cpu_milli, memory_mib))

    def _apply(self, sign: int, replica: ReplicaPlacement, cpu: int, mem: int) -> None:
        n = self.index[replica.node]
        gpus = self.free[n]
        for share in replica.gpus:
            before = gpus[share.index]
            after = before - sign * share.milli
            gpus[share.index] = after
            self.whole_free[n] += (after == MILLI) - (before == MILLI)
        if self.cpu_free[n] is not None:
            self.cpu_free[n] -= sign * cpu
        if self.mem_free[n] is not None:
            self.mem_free[n] -= sign * mem

    # -- questions ------------------------------------------------------------------------

    def host_fits(self, n: int, cpu_milli: int, memory_mib: int) -> bool:
        cpu, mem = self.cpu_free[n], self.mem_free[n]
        return (cpu is None or cpu >= cpu_milli) and (mem is None or mem >= memory_mib)

    def free_gpu_total(self) -> int:
        return sum(sum(gpus) for gpus in self.free)

    def most_whole_free(self) -> int:
        return max(self.whole_free, default=0)

    def most_free_on_one_gpu(self) -> int:
        return max((max(gpus) for gpus in self.free if gpus), default=0)

    def replica_on(self, n: int, shares: Sequence[tuple[int, int]]) -> ReplicaPlacement:
        return ReplicaPlacement(
            self.nodes[n].name, tuple(GpuShare(index, milli) for index, milli in shares)
        )
