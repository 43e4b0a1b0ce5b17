"""One cycle's working state: who runs where, what each queue uses, and what it may use.

A ``Session`` is built from a snapshot and changed only through ``start``/``evict``/
``move`` (which record decisions). After a cycle it describes the state its
decisions lead to, so a driver may ``fork`` it for the next arrivals instead of
building a new one from a snapshot.
Workloads that are *releasing* (evicted, inside their grace period) are already
gone as far as quotas are concerned. The capacity they still hold belongs to the
claimant their eviction made room for (``Workload.claimant``): everyone else sees it
as taken, and the claimant, when its turn comes, is placed onto it and *reserved*
there, starting once they exit. Without that link a later cycle would hand the
capacity to whoever comes first in service order and let the claimant evict again,
a cascade that never settles under a grace period.
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from scheduler.common.limits import MILLI
from scheduler.common.placement import Placement
from scheduler.engine import reasons
from scheduler.engine.aging import Aging
from scheduler.engine.fairshare import deserved_quotas, fair_shares, subtree_totals
from scheduler.engine.fragmentation import recent_workload
from scheduler.engine.ledger import Ledger
from scheduler.engine.model import (
    Decision,
    Evict,
    EvictReason,
    Move,
    Node,
    Request,
    Snapshot,
    Start,
    State,
    Workload,
    held_milli,
)
from scheduler.engine.placement import Scorer
from scheduler.engine.resources import HostResource, count_workloads, host_resources


class QueueStanding(NamedTuple):
    """What queue ordering may look at: a queue's position at this point of the cycle (milli).

    A named tuple rather than a dataclass: one is made for every re-keying of the service
    order, thousands per cycle."""

    name: str
    priority: int
    allocated: float
    fair_share: float
    deserved: float
    next_size: float
    """The size of the queue's next workload in line."""
    within_host: bool = True
    """Whether its next workload keeps it inside its deserved CPUs and memory (rule 3b)."""
    host_starved: float = 0.0
    """Its largest allocated / fair share over the counted CPUs and memory (0: none)."""


def default_queue_key(queue: QueueStanding) -> tuple:
    """Order between queues (rule 7): inside deserved quota first, then queue priority, then the
    most starved (allocated / fair share)."""
    if queue.fair_share > 1e-6:
        starved = queue.allocated / queue.fair_share
    else:
        starved = 0.0 if queue.allocated == 0 else float("inf")
    within = queue.allocated + queue.next_size <= queue.deserved + 1e-6 and queue.within_host
    if queue.host_starved > starved:
        starved = queue.host_starved  # the dominant resource (rule 3b)
    return (not within, -queue.priority, starved)


def default_workload_key(workload: Workload) -> tuple:
    """Order inside one queue (rule 7): higher priority, then earlier submission."""
    return (-workload.priority, workload.submitted_at, workload.seq)


def default_victim_key(workload: Workload, now: float) -> tuple:
    """Order of victims inside one queue (rule 4): lowest priority, then the least time since
    the last save (the least work lost per GPU freed), then most recently started. Without
    checkpoints that is "most recently started first", as before the engine knew of them."""
    return (
        workload.priority,
        now - workload.saved_at(now),
        -workload.start_seq,
        -(workload.started_at or 0.0),
        -workload.seq,
    )


def recent_first_victim_key(workload: Workload, now: float) -> tuple:
    """Rule 4 as Kueue and KAI apply it, blind to checkpoints: lowest priority, then most
    recently started. The fleet simulation's whole-GPU reclaim baseline uses it."""
    return (workload.priority, -workload.start_seq, -(workload.started_at or 0.0), -workload.seq)


LOSS_BOUND_GPU_SECONDS = 3600.0
"""``Policy.loss_bound``'s default: one GPU-hour (docs/benchmarks.md section 4 measures it)."""


def format_seconds(t: float) -> str:
    """Scenario time: seconds since the scenario began."""
    return f"t={t:g}s"


@dataclass(frozen=True)
class Policy:
    """The pluggable parts of the policy; the engine never reads configuration of its own."""

    scorer: Scorer
    queue_key: Callable[[QueueStanding], tuple] = default_queue_key
    workload_key: Callable[[Workload], tuple] = default_workload_key
    victim_key: Callable[[Workload, float], tuple] = default_victim_key
    """Order of victims inside one queue, given the workload and the cycle's time."""
    format_time: Callable[[float], str] = format_seconds
    consolidate: bool = True
    consolidation_nodes: int = 32
    """How many of the emptiest nodes consolidation tries for one workload; bounds its cost."""
    loss_bound: float | None = LOSS_BOUND_GPU_SECONDS
    """GPU-seconds of unsaved work above which a workload is never moved by consolidation,
    and never evicted except for a notebook or for a claimant inside its queue's deserved
    quota. None: no bound."""
    immediate_evictions: bool = True
    """False when evicted work keeps its GPUs for a grace period: whatever is placed on them
    is reserved, not started, until the driver reports the evicted work gone."""
    aging: Aging | None = None
    """A pending workload's rank inside its queue rises with its wait (``engine/aging.py``);
    None: the plain order, ``workload_key``."""
    interactive_reserve: int = 0
    """Milli-GPUs of idle capacity kept from work that would lend it beyond its project's
    quota, for in-quota notebooks (``engine/reserve.py``); 0: off."""
    reclaim_groups: bool = True
    """Reclaim skips whole groups of queues no claimant of the queue may take from (its own
    branch above its fair share, or their branch not above theirs) instead of weighing every
    queue with victims for each claimant. Same decisions either way (speed only); False is
    the plain reading, kept as the reference the shortcut is tested against."""

    def for_snapshot(self, snapshot: Snapshot) -> Policy:
        """This policy with the scorer's target workload taken from the cluster's own recent
        requests: the latest :data:`RECENT_REQUESTS` workloads of ``snapshot`` by submission.

        FGD-style placement keeps room for the shapes the cluster expects; a cluster's own
        requests say that better than any fixed guess. The same policy comes back while
        the mix stays the same, so a scorer's memo lives across cycles.
        """
        recent = heapq.nlargest(RECENT_REQUESTS, snapshot.workloads, key=lambda w: w.seq)
        return self.for_recent(snapshot.nodes, recent)

    def for_recent(self, nodes: Sequence[Node], recent: Iterable[Workload]) -> Policy:
        """``for_snapshot`` given the latest workloads already (a standing session keeps them)."""
        sizes = Counter(node.gpu_memory_mib for node in nodes if node.gpus)
        memory = sizes.most_common(1)[0][0] if sizes else 80 * 1024
        scorer = self.scorer.with_workload(recent_workload((w.request for w in recent), memory))
        return self if scorer is self.scorer else replace(self, scorer=scorer)


def _changed(workload: Workload, **changes: object) -> Workload:
    """``dataclasses.replace`` for the few fields a cycle changes, without running the
    constructor again: a burst cycle makes tens of thousands of these."""
    twin = object.__new__(Workload)
    twin.__dict__.update(workload.__dict__)
    twin.__dict__.update(changes)
    return twin


REQUEST_SIZES = 400_000
"""Request sizes a session (and its forks) remember before starting again."""

RECENT_REQUESTS = 1000
"""How many of the latest workloads describe the cluster's target workload."""


@dataclass
class Accounting:
    """Milli-GPUs per queue (departments include their subtree)."""

    allocated: dict[str, int] = field(default_factory=dict)
    non_preemptible: dict[str, int] = field(default_factory=dict)


class VictimLists(Mapping[str, list[Workload]]):
    """Queue -> its running preemptible work in victim order, sorted on first use.

    A cycle walks the victims of the queues it reclaims from, often a few of many: sorting
    only those spares a key per running workload in the others."""

    def __init__(
        self,
        members: Mapping[str, Mapping[str, Workload]],
        key: Callable[[Workload, float], tuple],
        now: float,
    ) -> None:
        self.members = members
        self.key = key
        self.now = now
        self.sorted: dict[str, list[Workload]] = {}
        self.filtered: dict[str, Any] = {}
        """Queue -> the victim search's filter of its list (``actions.victims.Filtered``),
        kept here so that the forks sharing these lists share it too (it checks itself)."""
        self.sides: dict[str, Any] = {}
        self.groups: dict[str, Any] = {}
        """The victim search's ``Candidates.sides_for`` and ``groups_for`` per claiming queue:
        they depend only on the queue tree and which queues have victims, fixed for these
        lists."""

    def __getitem__(self, queue: str) -> list[Workload]:
        found = self.sorted.get(queue)
        if found is None:
            key, now = self.key, self.now
            found = sorted(self.members[queue].values(), key=lambda w: key(w, now))
            self.sorted[queue] = found
        return found

    def __iter__(self) -> Iterator[str]:
        return (queue for queue, members in self.members.items() if members)

    def __len__(self) -> int:
        return sum(1 for members in self.members.values() if members)

    def __contains__(self, queue: object) -> bool:
        return bool(self.members.get(queue))  # type: ignore[call-overload]


class Session:
    def __init__(self, snapshot: Snapshot, now: float, policy: Policy) -> None:
        self.now = now
        self.policy = policy
        self.queues = {queue.name: queue for queue in snapshot.queues}
        self.queue_order = {queue.name: i for i, queue in enumerate(snapshot.queues)}
        self.ancestry = {name: self._ancestors(name) for name in self.queues}
        self.departments = {queue.parent for queue in snapshot.queues if queue.parent}
        self.deserved = deserved_quotas(snapshot.queues)
        self.usage = snapshot.usage
        """The queues' decayed past use, when usage-decayed fair share is on."""
        self._fair_without_usage: dict[str, float] | None = None
        nodes = {node.name for node in snapshot.nodes}
        self.largest_gpu_mib = max((node.gpu_memory_mib for node in snapshot.nodes), default=1)
        self.decisions: list[Decision] = []
        self.running: dict[str, Workload] = {}
        self.pending: dict[str, Workload] = {}
        """Waiting work by name (the cycle serves it in rule 7's order, never in this one's)."""
        self.reserved: dict[str, str] = {}
        """Pending workload -> why it waits, for those placed onto releasing capacity."""
        self._placed_size: dict[str, int] = {}
        self._by_node: dict[str, list[str]] | None = None
        self._request_size: dict[int, tuple[Request, int]] = {}
        """id(request) -> (request, milli-GPUs): by identity, since hashing and comparing
        request dataclasses cost more than the size itself (a workload keeps its request
        object from cycle to cycle, so the standing session's entries stay valid)."""
        self._next_start_seq = 1 + max((w.start_seq for w in snapshot.workloads), default=0)

        releasing: list[Placement] = []
        claimed: list[Placement] = []
        self.claimed: dict[str, list[Placement]] = {}
        """Claimant -> capacity held for it by the work evicted on its behalf."""
        pending_names = {w.name for w in snapshot.workloads if w.state is State.PENDING}
        demand = dict.fromkeys(self.queues, 0)
        allocated = dict.fromkeys(self.queues, 0)
        non_preemptible = dict.fromkeys(self.queues, 0)
        self.yielding: set[str] = set()
        """Requeued victims whose claimant still waits: served after everyone else."""
        for workload in snapshot.workloads:
            if workload.state is State.PENDING:
                self.pending[workload.name] = workload
                if workload.claimant in pending_names:
                    self.yielding.add(workload.name)
                demand[workload.queue] += self.request_size(workload)
                continue
            on_known_nodes = all(replica.node in nodes for replica in workload.placement)
            if workload.state is State.RELEASING:
                demand[workload.queue] += self.request_size(workload)
                if on_known_nodes and workload.claimant in pending_names:
                    claimed.append(workload.placement)
                    self.claimed.setdefault(workload.claimant, []).append(workload.placement)
                elif on_known_nodes:
                    releasing.append(workload.placement)
            elif not on_known_nodes:
                self._record(Evict(workload.name, EvictReason.NODE_LOST, **self.loss(workload)))
                self.pending[workload.name] = replace(workload, state=State.PENDING, placement=())
                demand[workload.queue] += self.request_size(workload)
            else:
                self.running[workload.name] = workload
                size = self._placed_size[workload.name] = held_milli(workload.placement)
                demand[workload.queue] += size
                allocated[workload.queue] += size
                if not workload.preemptible:
                    non_preemptible[workload.queue] += size
        self.ledger = Ledger(
            snapshot.nodes,
            [
                *(
                    (w.placement, w.request.cpu_milli, w.request.memory_mib)
                    for w in self.running.values()
                ),
                *((placement, 0, 0) for placement in claimed),
            ],
            ((w.placement, w.user) for w in self.running.values()),
        )
        self.held = [[0] * len(gpus) for gpus in self.ledger.free]
        self._own_held = set(range(len(self.held)))
        """Nodes whose ``held`` list this session may change in place (see ``fork``)."""
        for placement in releasing:
            self._hold(placement)
        self.use = Accounting(
            {name: int(v) for name, v in subtree_totals(snapshot.queues, allocated).items()},
            {name: int(v) for name, v in subtree_totals(snapshot.queues, non_preemptible).items()},
        )
        self.capacity = sum(node.gpus for node in snapshot.nodes) * MILLI
        self.demand = demand
        self.fair = fair_shares(snapshot.queues, self.deserved, demand, self.capacity, self.usage)
        self.host: list[HostResource] = host_resources(snapshot.queues, snapshot.nodes)
        """The CPUs and memory counted by quota (rule 3b); empty: GPUs alone, as before."""
        if self.host:
            releasing_work = [w for w in snapshot.workloads if w.state is State.RELEASING]
            count_workloads(
                self.host,
                snapshot.queues,
                self.running.values(),
                [*self.pending.values(), *releasing_work],
            )
        self.running_count = dict.fromkeys(self.queues, 0)
        for workload in self.running.values():
            self.running_count[workload.queue] += 1
        self.requeued: list[Workload] = []
        """Work this session evicted, pending again as the driver will report it."""
        self._protections = sorted(
            (w.started_at + w.min_runtime, w.name, w.started_at)
            for w in self.running.values()
            if w.preemptible and w.min_runtime > 0 and w.started_at is not None
        )
        self._new_protections: list[tuple[float, str, float]] = []
        self._victims: VictimLists | None = None
        self._victims_cover = 0
        self.first_new_start = self._next_start_seq
        """Starts (and moves) in this session are numbered from here; such work is not a victim
        in the same cycle."""

    def order_key(self) -> Callable[[Workload], tuple]:
        """The order inside a queue this cycle (rule 7): the policy's ``workload_key``, or,
        with aging, the effective priority at ``now``."""
        aging = self.policy.aging
        return self.policy.workload_key if aging is None else aging.key(self.now)

    def fork(self, arrivals: Sequence[Workload], now: float) -> Session:
        """This session's outcome as a new starting point, with ``arrivals`` pending.

        Building a session from a snapshot touches every running workload; a fork copies
        the ledger and a few dicts instead, so deciding one arriving notebook in a busy
        cluster takes milliseconds. The outcome assumes the driver applied this session's
        decisions; anything else changed since calls for a fresh session.
        """
        twin = object.__new__(Session)
        twin.__dict__.update(self.__dict__)
        twin.now = now
        twin.decisions = []
        twin.reserved = {}
        twin.claimed = {k: list(v) for k, v in self.claimed.items()}
        twin.running = dict(self.running)
        running = self.running
        twin.pending = {name: w for name, w in self.pending.items() if name not in running}
        for workload in (*self.requeued, *arrivals):
            twin.pending[workload.name] = workload
        twin.requeued = []
        prepare = getattr(self.policy.scorer, "prepare", None)
        if prepare is not None:
            prepare(self.ledger)  # scorer caches (frachub's columns) made here once, then copied
        twin.ledger = self.ledger.copy()
        twin.held = list(self.held)  # each node's list copied before its first change
        self._own_held, twin._own_held = set(), set()
        twin.use = Accounting(dict(self.use.allocated), dict(self.use.non_preemptible))
        twin._placed_size = dict(self._placed_size)
        twin.running_count = dict(self.running_count)
        twin._protections = self._protections_now()
        twin._new_protections = []
        if self._victims is not None and self._victims_cover == self._next_start_seq:
            twin._victims = self._victims  # nothing started since they were sorted
        else:
            twin._victims = None
        twin.first_new_start = self._next_start_seq
        twin.demand = dict(self.demand)
        for workload in arrivals:
            twin.demand[workload.queue] += self.request_size(workload)
        twin.fair = fair_shares(
            tuple(self.queues.values()), self.deserved, twin.demand, self.capacity, twin.usage
        )
        twin._fair_without_usage = None
        if self.host:
            twin.host = [resource.fork() for resource in self.host]
            for resource in twin.host:
                for workload in arrivals:
                    resource.demand[workload.queue] += resource.amount(workload.request)
                resource.compute_fair(tuple(self.queues.values()))
        return twin

    @property
    def fair_without_usage(self) -> Mapping[str, float]:
        """The fair shares the queues' weights alone give (``fair`` when usage is off): what
        the usage moved a queue's share from, for its status and pending reasons."""
        if self.usage is None:
            return self.fair
        if self._fair_without_usage is None:
            self._fair_without_usage = fair_shares(
                tuple(self.queues.values()), self.deserved, self.demand, self.capacity
            )
        return self._fair_without_usage

    def victim_lists(self) -> Mapping[str, list[Workload]]:
        """Running preemptible work per queue in victim order (rule 4), each queue sorted when
        first asked for and shared with forks (who skip whatever no longer runs)."""
        if self._victims is None:
            self._victims_cover = self._next_start_seq
            members: dict[str, dict[str, Workload]] = {}
            for workload in self.running.values():
                if workload.preemptible:
                    members.setdefault(workload.queue, {})[workload.name] = workload
            self._victims = VictimLists(members, self.policy.victim_key, self.now)
        return self._victims

    def _protections_now(self) -> list[tuple[float, str, float]]:
        if not self._new_protections:
            return self._protections
        return sorted([*self._protections, *self._new_protections])

    def next_wakeup(self) -> float | None:
        """The earliest instant a running workload's min_runtime protection ends."""
        candidates = [self._protections, sorted(self._new_protections)]
        best = None
        for entries in candidates:
            for i in range(bisect.bisect_right(entries, (self.now, "\uffff")), len(entries)):
                end, name, started_at = entries[i]
                if end <= self.now:
                    continue
                workload = self.running.get(name)
                if workload is not None and workload.started_at == started_at:
                    if best is None or end < best:
                        best = end
                    break
        return best

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
        if workload.state is not State.PENDING:
            placed = self._placed_size.get(workload.name)
            if placed is not None:
                return placed
        return self.request_size(workload)

    def request_size(self, workload: Workload) -> int:
        request = workload.request
        known = self._request_size.get(id(request))
        if known is not None and known[0] is request:
            return known[1]
        if request.whole_gpus:
            per_replica = request.whole_gpus * MILLI
        elif request.is_fraction:
            per_replica = request.milli_on(self.largest_gpu_mib)
        else:
            per_replica = 0
        size = per_replica * request.replicas
        if len(self._request_size) >= REQUEST_SIZES:
            self._request_size.clear()  # a long-lived standing session meets ever new requests
        self._request_size[id(request)] = (request, size)
        return size

    def host_demand(self, workload: Workload, sign: int) -> None:
        """Add (or take away) the workload's CPUs and memory to its queue's demand, where
        ``demand`` changes for its GPUs (the standing state's incremental updates)."""
        for resource in self.host:
            resource.demand[workload.queue] += sign * resource.amount(workload.request)

    def _count(self, workload: Workload, sign: int, size: int | None = None) -> None:
        amount = sign * (self.size(workload) if size is None else size)
        for name in self.ancestry[workload.queue]:
            self.use.allocated[name] += amount
            if not workload.preemptible:
                self.use.non_preemptible[name] += amount
        for resource in self.host:
            host_amount = sign * resource.amount(workload.request)
            for name in self.ancestry[workload.queue]:
                resource.allocated[name] += host_amount
                if not workload.preemptible:
                    resource.non_preemptible[name] += host_amount

    def _hold(self, placement: Placement, sign: int = 1) -> None:
        for replica in placement:
            n = self.ledger.index[replica.node]
            if n not in self._own_held:
                self.held[n] = list(self.held[n])
                self._own_held.add(n)
            for share in replica.gpus:
                self.held[n][share.index] += sign * share.milli

    def open_claim(self, claimant: str) -> list[Placement]:
        """Make the capacity held for ``claimant`` placeable (as releasing) for its turn."""
        placements = self.claimed.pop(claimant, [])
        for placement in placements:
            self.ledger.give_back(placement)
            self._hold(placement)
        return placements

    def close_claim(self, placements: list[Placement]) -> None:
        """The claimant did not use its held capacity: it stays taken until released."""
        for placement in placements:
            self._hold(placement, -1)
            self.ledger.take(placement)

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

    def on_node(self, node: str) -> list[Workload]:
        """Work running on ``node`` (by its first replica) that was running when the cycle began
        and still runs there."""
        if self._by_node is None:
            self._by_node = {}
            for name, workload in self.running.items():
                self._by_node.setdefault(workload.placement[0].node, []).append(name)
        found = []
        for name in self._by_node.get(node, ()):
            workload = self.running.get(name)
            if workload is not None and workload.placement[0].node == node:
                found.append(workload)
        return found

    def at_risk(self, workload: Workload) -> float:
        """GPU-seconds that evicting or moving ``workload`` now would destroy
        (``Workload.work_at_risk``, with the size this session already knows)."""
        return self.size(workload) / MILLI * (self.now - workload.saved_at(self.now))

    def loss(self, workload: Workload) -> dict[str, float]:
        """The lost-work fields of an ``Evict`` or ``Move`` of ``workload`` now."""
        return {
            "lost_seconds": self.now - workload.saved_at(self.now),
            "lost_gpu_seconds": workload.work_at_risk(self.now),
        }

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
        size = self._placed_size[workload.name] = held_milli(placement)
        self._count(workload, +1, size)
        if self.conflicts_with_releasing(placement):
            self.reserved[workload.name] = reasons.reserved()
            return _changed(workload, state=State.RUNNING, placement=placement)
        placed = _changed(
            workload,
            state=State.RUNNING,
            placement=placement,
            started_at=self.now,
            start_seq=self._next_start_seq,
        )
        self._next_start_seq += 1
        self.running[workload.name] = placed
        self.running_count[workload.queue] += 1
        self._protect(placed)
        self._record(Start(workload.name, placement))
        return placed

    def evict(self, workload: Workload, reason: EvictReason, claimant: str) -> None:
        """Give the workload's capacity back and requeue it (the driver applies the grace)."""
        del self.running[workload.name]
        self.running_count[workload.queue] -= 1
        self._count(workload, -1)
        del self._placed_size[workload.name]
        self.requeued.append(_changed(workload, state=State.PENDING, placement=(), started_at=None))
        self.ledger.give_back(
            workload.placement,
            workload.request.cpu_milli,
            workload.request.memory_mib,
            workload.user,
        )
        if not self.policy.immediate_evictions:
            self._hold(workload.placement)
        self._record(Evict(workload.name, reason, claimant, **self.loss(workload)))

    def finish(self, name: str) -> None:
        """A running workload ended: give its capacity back and drop its demand. For a fork
        a driver keeps between cycles (the service's fast path), so an arrival sees GPUs a
        released notebook freed without waiting for the next cycle."""
        workload = self.running.pop(name)
        self.running_count[workload.queue] -= 1
        size = self._placed_size.pop(name)
        self._count(workload, -1, size)
        self.demand = {**self.demand, workload.queue: self.demand[workload.queue] - size}
        self.ledger.give_back(
            workload.placement,
            workload.request.cpu_milli,
            workload.request.memory_mib,
            workload.user,
        )
        queues = tuple(self.queues.values())
        self.fair = fair_shares(queues, self.deserved, self.demand, self.capacity, self.usage)
        self._fair_without_usage = None
        for resource in self.host:
            resource.demand[workload.queue] -= resource.amount(workload.request)
            resource.compute_fair(queues)

    def move(self, workload: Workload, placement: Placement, claimant: str) -> None:
        """A consolidation move; the caller has already taken the new spot on the ledger."""
        if not self.policy.immediate_evictions:
            self._hold(workload.placement)
        moved = _changed(
            workload, placement=placement, started_at=self.now, start_seq=self._next_start_seq
        )
        self._next_start_seq += 1
        self._count(workload, -1)
        self._placed_size[workload.name] = held_milli(placement)
        self._count(moved, +1)
        self.running[workload.name] = moved
        self._protect(moved)
        self._record(Move(workload.name, placement, claimant, **self.loss(workload)))

    def _protect(self, workload: Workload) -> None:
        if workload.preemptible and workload.min_runtime > 0:
            self._new_protections.append((self.now + workload.min_runtime, workload.name, self.now))
