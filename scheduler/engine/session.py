"""One cycle's working state: who runs where, what each queue uses, and what it may use.

A ``Session`` is built from a snapshot, changed only through ``start``/``evict``/
``move`` (which record decisions), and thrown away at the end of the cycle.
Workloads that are *releasing* (evicted, inside their grace period) are already
gone as far as quotas and placement are concerned; a workload placed onto the
capacity they still hold is *reserved* there and starts once they exit, so the
engine never evicts twice for the same claim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from scheduler.engine import reasons
from scheduler.engine.fairshare import deserved_quotas, fair_shares
from scheduler.engine.ledger import Ledger
from scheduler.engine.model import (
    MILLI,
    Decision,
    Evict,
    EvictReason,
    Move,
    Placement,
    Snapshot,
    Start,
    State,
    Workload,
)
from scheduler.engine.placement import Scorer


def _by_start_order(workload: Workload) -> tuple[int, float, int]:
    return workload.start_seq, workload.started_at or 0.0, workload.seq


@dataclass(frozen=True)
class QueueStanding:
    """What queue ordering may look at: a queue's position at this point of the cycle (milli)."""

    name: str
    priority: int
    allocated: float
    fair_share: float
    deserved: float
    next_size: float
    """The size of the queue's next workload in line."""


def default_queue_key(queue: QueueStanding) -> tuple:
    """Order between queues (rule 7): inside deserved quota first, then queue priority, then the
    most starved (allocated / fair share)."""
    if queue.fair_share > 1e-6:
        starved = queue.allocated / queue.fair_share
    else:
        starved = 0.0 if queue.allocated == 0 else float("inf")
    within = queue.allocated + queue.next_size <= queue.deserved + 1e-6
    return (not within, -queue.priority, starved)


def default_workload_key(workload: Workload) -> tuple:
    """Order inside one queue (rule 7): higher priority, then earlier submission."""
    return (-workload.priority, workload.submitted_at, workload.seq)


def default_victim_key(workload: Workload) -> tuple:
    """Order of victims inside one queue (rule 4): lowest priority, then most recently started."""
    return (workload.priority, -workload.start_seq, -(workload.started_at or 0.0), -workload.seq)


def format_seconds(t: float) -> str:
    """Scenario time: seconds since the scenario began."""
    return f"t={t:g}s"


@dataclass(frozen=True)
class Policy:
    """The pluggable parts of the policy; the engine never reads configuration of its own."""

    scorer: Scorer
    queue_key: Callable[[QueueStanding], tuple] = default_queue_key
    workload_key: Callable[[Workload], tuple] = default_workload_key
    victim_key: Callable[[Workload], tuple] = default_victim_key
    format_time: Callable[[float], str] = format_seconds
    consolidate: bool = True
    consolidation_nodes: int = 32
    """How many of the emptiest nodes consolidation tries for one workload; bounds its cost."""
    immediate_evictions: bool = True
    """False when evicted work keeps its GPUs for a grace period: whatever is placed on them
    is reserved, not started, until the driver reports the evicted work gone."""


@dataclass
class Accounting:
    """Milli-GPUs per queue (departments include their subtree)."""

    allocated: dict[str, int] = field(default_factory=dict)
    non_preemptible: dict[str, int] = field(default_factory=dict)


class Session:
    def __init__(self, snapshot: Snapshot, now: float, policy: Policy) -> None:
        self.now = now
        self.policy = policy
        self.queues = {queue.name: queue for queue in snapshot.queues}
        self.queue_order = {queue.name: i for i, queue in enumerate(snapshot.queues)}
        self.ancestry = {name: self._ancestors(name) for name in self.queues}
        self.deserved = deserved_quotas(snapshot.queues)
        self.ledger = Ledger(snapshot.nodes)
        self.largest_gpu_mib = max((node.gpu_memory_mib for node in snapshot.nodes), default=1)
        self.decisions: list[Decision] = []
        self.running: dict[str, Workload] = {}
        self.pending: list[Workload] = []
        self.reserved: dict[str, str] = {}
        """Pending workload -> why it waits, for those placed onto releasing capacity."""
        self.held = [[0] * len(gpus) for gpus in self.ledger.free]
        self.use = Accounting(dict.fromkeys(self.queues, 0), dict.fromkeys(self.queues, 0))
        self._next_start_seq = 1 + max((w.start_seq for w in snapshot.workloads), default=0)

        demand = dict.fromkeys(self.queues, 0)
        for workload in snapshot.workloads:
            demand[workload.queue] += self.size(workload)
            if workload.state is State.PENDING:
                self.pending.append(workload)
            elif workload.state is State.RELEASING:
                if all(r.node in self.ledger.index for r in workload.placement):
                    self._hold(workload.placement)
            elif any(r.node not in self.ledger.index for r in workload.placement):
                self._record(Evict(workload.name, EvictReason.NODE_LOST))
                self.pending.append(replace(workload, state=State.PENDING, placement=()))
            else:
                self.ledger.take(
                    workload.placement, workload.request.cpu_milli, workload.request.memory_mib
                )
                self.running[workload.name] = workload
                self._count(workload, +1)
        self.capacity = sum(node.gpus for node in snapshot.nodes) * MILLI
        self.fair = fair_shares(snapshot.queues, self.deserved, demand, self.capacity)
        self.ledger.mark()

    def _ancestors(self, name: str) -> tuple[str, ...]:
        chain = []
        current: str | None = name
        while current is not None:
            chain.append(current)
            current = self.queues[current].parent
        return tuple(chain)

    # -- sizes and accounting -------------------------------------------------------------

    def size(self, workload: Workload) -> int:
        """Milli-GPUs the workload holds, or would hold on the largest GPUs if pending."""
        if workload.placement and workload.state is not State.PENDING:
            return sum(s.milli for replica in workload.placement for s in replica.gpus)
        return self.request_size(workload)

    def request_size(self, workload: Workload) -> int:
        request = workload.request
        if request.whole_gpus:
            per_replica = request.whole_gpus * MILLI
        else:
            per_replica = request.milli_on(self.largest_gpu_mib) if request.is_fraction else 0
        return per_replica * request.replicas

    def _count(self, workload: Workload, sign: int) -> None:
        amount = sign * self.size(workload)
        for name in self.ancestry[workload.queue]:
            self.use.allocated[name] += amount
            if not workload.preemptible:
                self.use.non_preemptible[name] += amount

    def _hold(self, placement: Placement) -> None:
        for replica in placement:
            n = self.ledger.index[replica.node]
            for share in replica.gpus:
                self.held[n][share.index] += share.milli

    def conflicts_with_releasing(self, placement: Placement) -> bool:
        """True when part of ``placement`` is still held by a workload in its grace period."""
        for replica in placement:
            n = self.ledger.index[replica.node]
            for share in replica.gpus:
                if (
                    self.held[n][share.index]
                    and self.ledger.free[n][share.index] < self.held[n][share.index]
                ):
                    return True
        return False

    def protected_until(self, workload: Workload) -> float | None:
        """When min_runtime stops protecting ``workload``, if it protects it now."""
        if workload.min_runtime <= 0 or workload.started_at is None:
            return None
        end = workload.started_at + workload.min_runtime
        return end if end > self.now else None

    # -- changes (each one records its decision) ------------------------------------------

    def _record(self, decision: Decision) -> None:
        self.decisions.append(decision)

    def start(self, workload: Workload, placement: Placement) -> Workload:
        """Account a placement already taken on the ledger; reserve it if capacity is releasing."""
        placed = replace(workload, state=State.RUNNING, placement=placement)
        self._count(placed, +1)
        if self.conflicts_with_releasing(placement):
            self.reserved[workload.name] = reasons.reserved()
            return placed
        placed = replace(placed, started_at=self.now, start_seq=self._next_start_seq)
        self._next_start_seq += 1
        self.running[workload.name] = placed
        self._record(Start(workload.name, placement))
        return placed

    def evict(self, workload: Workload, reason: EvictReason, claimant: str) -> None:
        """Give the workload's capacity back and requeue it (the driver applies the grace)."""
        del self.running[workload.name]
        self._count(workload, -1)
        self.ledger.give_back(
            workload.placement, workload.request.cpu_milli, workload.request.memory_mib
        )
        if not self.policy.immediate_evictions:
            self._hold(workload.placement)
        self._record(Evict(workload.name, reason, claimant))

    def move(self, workload: Workload, placement: Placement, claimant: str) -> None:
        """A consolidation move; the caller has already taken the new spot on the ledger."""
        if not self.policy.immediate_evictions:
            self._hold(workload.placement)
        moved = replace(
            workload, placement=placement, started_at=self.now, start_seq=self._next_start_seq
        )
        self._next_start_seq += 1
        self._count(workload, -1)
        self._count(moved, +1)
        self.running[workload.name] = moved
        self._record(Move(workload.name, placement, claimant))
