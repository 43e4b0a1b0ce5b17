"""The cycle's actions: allocate, consolidate, reclaim, preempt (SCENARIOS.md rules 3-7).

Each action works on a ``Session`` and tries one pending workload at a time on
the ledger, keeping an attempt only if the workload starts. ``allocate`` uses
idle capacity only; the three others evict or move running work, and run only
for workloads that ``allocate`` could not place.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from scheduler.engine import reasons
from scheduler.engine.model import EvictReason, Placement, Workload
from scheduler.engine.placement import fits_somewhere_ever, place
from scheduler.engine.session import QueueStanding, Session

_EPS = 1e-6


@dataclass
class Outcome:
    """Why a workload could not start in this cycle (None when it started)."""

    reason: str
    capacity: bool
    """True when only free capacity was missing, so evictions might help."""
    quota_blocked: bool = False
    """True when a limit or the non-preemptible quota refused it; only preempt can help."""


# -- quota checks -------------------------------------------------------------------------


def freed_by(session: Session, victims: list[Workload]) -> tuple[dict[str, int], dict[str, int]]:
    """Milli-GPUs that evicting ``victims`` gives back, per queue and ancestor."""
    freed: dict[str, int] = {}
    freed_np: dict[str, int] = {}
    for victim in victims:
        size = session.size(victim)
        for name in session.ancestry[victim.queue]:
            freed[name] = freed.get(name, 0) + size
            if not victim.preemptible:
                freed_np[name] = freed_np.get(name, 0) + size
    return freed, freed_np


def quota_refusal(
    session: Session,
    workload: Workload,
    size: int,
    freed: Mapping[str, int] | None = None,
    freed_np: Mapping[str, int] | None = None,
) -> str | None:
    """Rule 3: limits at every level; non-preemptible work inside deserved at every level."""
    freed = freed or {}
    freed_np = freed_np or {}
    for name in session.ancestry[workload.queue]:
        queue = session.queues[name]
        used = session.use.allocated[name] - freed.get(name, 0)
        if queue.limit_gpus is not None and used + size > queue.limit_gpus * 1000 + _EPS:
            return reasons.at_limit(session, name, used, size)
        if not workload.preemptible:
            used_np = session.use.non_preemptible[name] - freed_np.get(name, 0)
            if used_np + size > session.deserved[name] + _EPS:
                return reasons.beyond_deserved(session, name, workload, used_np, size)
    return None


# -- allocate -----------------------------------------------------------------------------


@dataclass
class Failures:
    """Request shapes that found no room; during allocate capacity only shrinks, so any request
    at least as large fails too and need not be placed again."""

    shapes: list[tuple[bool, int, int, int, int]] = field(default_factory=list)

    @staticmethod
    def shape(workload: Workload) -> tuple[bool, int, int, int, int] | None:
        request = workload.request
        if request.gpu_memory_mib is not None:
            return None
        size = request.whole_gpus * 1000 if request.whole_gpus else round(request.gpus * 1000)
        return (request.is_fraction, size, request.replicas, request.cpu_milli, request.memory_mib)

    def known(self, shape: tuple[bool, int, int, int, int] | None) -> bool:
        return shape is not None and any(
            failed[0] == shape[0]
            and all(a >= b for a, b in zip(shape[1:], failed[1:], strict=True))
            for failed in self.shapes
        )


def service_order(session: Session, pending: list[Workload]) -> Iterator[Workload]:
    """Pending work in rule 7's order, recomputed as queues fill up.

    Queues first whose allocation with their next workload stays inside the deserved quota, then
    higher queue priority, then the most starved queue (allocated / fair share), then workload
    priority and submission time. A queue's key only changes when that queue starts something,
    so a heap with one entry per queue stays exact.
    """
    by_queue: dict[str, list[Workload]] = {}
    for workload in sorted(pending, key=session.policy.workload_key):
        by_queue.setdefault(workload.queue, []).append(workload)
    heads = dict.fromkeys(by_queue, 0)

    def key(name: str) -> tuple:
        head = by_queue[name][heads[name]]
        standing = QueueStanding(
            name=name,
            priority=session.queues[name].priority,
            allocated=session.use.allocated[name],
            fair_share=session.fair.get(name, 0.0),
            deserved=session.deserved[name],
            next_size=session.request_size(head),
        )
        return (
            *session.policy.queue_key(standing),
            *session.policy.workload_key(head),
            session.queue_order[name],
        )

    heap = [(key(name), name) for name in by_queue]
    heapq.heapify(heap)
    while heap:
        _, name = heapq.heappop(heap)
        yield by_queue[name][heads[name]]
        heads[name] += 1
        if heads[name] < len(by_queue[name]):
            heapq.heappush(heap, (key(name), name))


def allocate(session: Session) -> tuple[list[Workload], dict[str, Outcome]]:
    """Start what fits in idle capacity; returns the rest in service order with their outcomes."""
    failures = Failures()
    left: list[Workload] = []
    outcomes: dict[str, Outcome] = {}
    for workload in service_order(session, session.pending):
        outcome = try_start(session, workload, failures)
        if outcome is not None:
            left.append(workload)
            outcomes[workload.name] = outcome
    return left, outcomes


def try_start(
    session: Session, workload: Workload, failures: Failures | None = None
) -> Outcome | None:
    size = session.request_size(workload)
    refusal = quota_refusal(session, workload, size)
    if refusal is not None:
        return Outcome(refusal, capacity=False, quota_blocked=True)
    shape = Failures.shape(workload)
    if failures is not None and failures.known(shape):
        return _no_room(session, workload)
    mark = session.ledger.mark()
    placement = place(session.ledger, workload.request, session.policy.scorer)
    if placement is None:
        if failures is not None and shape is not None:
            failures.shapes.append(shape)
        return _no_room(session, workload)
    actual = _placed_size(placement)
    if actual != size:  # a memory request landed on a smaller GPU: check again, exactly
        refusal = quota_refusal(session, workload, actual)
        if refusal is not None:
            session.ledger.rollback(mark)
            return Outcome(refusal, capacity=False, quota_blocked=True)
    session.start(workload, placement)
    return None


def _no_room(session: Session, workload: Workload) -> Outcome:
    """Capacity is missing; evictions can only help if an empty node could hold it."""
    shapes = [(node.gpus, node.gpu_memory_mib) for node in session.ledger.nodes]
    ever = fits_somewhere_ever(shapes, workload.request)
    return Outcome(reasons.no_room(session, workload), capacity=ever)


def _placed_size(placement: Placement) -> int:
    return sum(share.milli for replica in placement for share in replica.gpus)


# -- evictions: shared search -------------------------------------------------------------


@dataclass
class _Search:
    """Victims added in order until the claimant fits, then the unneeded ones dropped."""

    session: Session
    claimant: Workload
    victims: list[Workload] = field(default_factory=list)
    protected_until: float | None = None

    def fits(self, victims: list[Workload]) -> Placement | None:
        """Would the claimant start with ``victims`` gone? Leaves the ledger unchanged."""
        session = self.session
        freed, freed_np = freed_by(session, victims)
        size = session.request_size(self.claimant)
        if quota_refusal(session, self.claimant, size, freed, freed_np) is not None:
            return None
        mark = session.ledger.mark()
        for victim in victims:
            session.ledger.give_back(
                victim.placement, victim.request.cpu_milli, victim.request.memory_mib
            )
        placement = place(session.ledger, self.claimant.request, session.policy.scorer)
        session.ledger.rollback(mark)
        if placement is None or _placed_size(placement) == size:
            return placement
        # a memory request sized on the largest GPU landed on a smaller one: check exactly
        if quota_refusal(session, self.claimant, _placed_size(placement), freed, freed_np):
            return None
        return placement

    def minimal(self) -> list[Workload]:
        kept = list(self.victims)
        for victim in list(kept):
            trial = [v for v in kept if v is not victim]
            if self.fits(trial) is not None:
                kept = trial
        return kept

    def note_protected(self, until: float) -> None:
        if self.protected_until is None or until < self.protected_until:
            self.protected_until = until


def _commit(
    session: Session, claimant: Workload, victims: list[Workload], reason: EvictReason
) -> None:
    for victim in victims:
        session.evict(victim, reason, claimant.name)
    placement = place(session.ledger, claimant.request, session.policy.scorer)
    assert placement is not None, "a fit found by the search must still fit"
    session.start(claimant, placement)


def victim_candidates(session: Session) -> dict[str, list[Workload]]:
    """Running preemptible work per queue, in victim order (rule 4)."""
    per_queue: dict[str, list[Workload]] = {}
    for workload in session.running.values():
        if workload.preemptible:
            per_queue.setdefault(workload.queue, []).append(workload)
    for candidates in per_queue.values():
        candidates.sort(key=session.policy.victim_key)
    return per_queue


# -- reclaim ------------------------------------------------------------------------------


def _sides(session: Session, claimer: str, victim: str) -> tuple[str, str]:
    """The two siblings under the lowest common ancestor of two queues."""
    up_claimer = session.ancestry[claimer][::-1]
    up_victim = session.ancestry[victim][::-1]
    depth = 0
    while (
        depth < len(up_claimer) - 1
        and depth < len(up_victim) - 1
        and up_claimer[depth] == up_victim[depth]
    ):
        depth += 1
    return up_claimer[depth], up_victim[depth]


def reclaim(
    session: Session, claimant: Workload, candidates: dict[str, list[Workload]]
) -> tuple[bool, _Search]:
    """Take back capacity from queues above their fair share (or above deserved, for a claimant
    inside its own deserved quota). Returns whether the claimant started."""
    search = _Search(session, claimant)
    size = session.request_size(claimant)
    home = claimant.queue
    if session.use.allocated[home] + size > session.fair.get(home, 0.0) + _EPS:
        return False, search
    cursor = {name: 0 for name in candidates if name != home}
    while True:
        freed, _ = freed_by(session, search.victims)

        def after(name: str, freed: dict[str, int] = freed) -> float:
            return session.use.allocated[name] - freed.get(name, 0)

        best: tuple[float, int, str] | None = None
        for name in cursor:
            if cursor[name] >= len(candidates[name]):
                continue
            mine, theirs = _sides(session, home, name)
            above_fair = (
                after(name) > session.fair.get(name, 0.0) + _EPS
                and after(theirs) > session.fair.get(theirs, 0.0) + _EPS
            )
            claimer_within = all(
                after(level) + size <= session.deserved[level] + _EPS for level in (home, mine)
            )
            above_deserved = (
                after(name) > session.deserved[name] + _EPS
                and after(theirs) > session.deserved[theirs] + _EPS
            )
            if not (above_fair or (claimer_within and above_deserved)):
                continue
            fair = session.fair.get(name, 0.0)
            ratio = after(name) / fair if fair > _EPS else float("inf")
            entry = (-ratio, session.queue_order[name], name)
            if best is None or entry < best:
                best = entry
        if best is None:
            return False, search
        victim = _next_victim(session, candidates[best[2]], cursor, best[2], search)
        if victim is None:
            continue
        search.victims.append(victim)
        if (
            _within_fair_after(session, claimant, size, search.victims)
            and search.fits(search.victims) is not None
        ):
            break
    victims = search.minimal()
    _commit(session, claimant, victims, EvictReason.RECLAIM)
    return True, search


def _within_fair_after(
    session: Session, claimant: Workload, size: int, victims: list[Workload]
) -> bool:
    freed, _ = freed_by(session, victims)
    return all(
        session.use.allocated[level] - freed.get(level, 0) + size
        <= session.fair.get(level, 0.0) + _EPS
        for level in session.ancestry[claimant.queue]
    )


def _next_victim(
    session: Session,
    queue_candidates: list[Workload],
    cursor: dict[str, int],
    name: str,
    search: _Search,
) -> Workload | None:
    """The queue's next candidate if it still runs unprotected, else None (and move on)."""
    workload = session.running.get(queue_candidates[cursor[name]].name)
    cursor[name] += 1
    if workload is None:
        return None
    until = session.protected_until(workload)
    if until is not None:
        search.note_protected(until)
        return None
    return workload


# -- preempt ------------------------------------------------------------------------------


def preempt(
    session: Session, claimant: Workload, candidates: dict[str, list[Workload]]
) -> tuple[bool, _Search]:
    """Evict lower-priority preemptible work of the claimant's own queue; equal never preempts."""
    search = _Search(session, claimant)
    own = [w for w in candidates.get(claimant.queue, []) if w.priority < claimant.priority]
    cursor = {claimant.queue: 0}
    while cursor[claimant.queue] < len(own):
        victim = _next_victim(session, own, cursor, claimant.queue, search)
        if victim is None:
            continue
        search.victims.append(victim)
        if search.fits(search.victims) is not None:
            _commit(session, claimant, search.minimal(), EvictReason.PREEMPT)
            return True, search
    return False, search


# -- consolidate --------------------------------------------------------------------------


def consolidate(session: Session, claimant: Workload) -> bool:
    """Move preemptible single-replica work so that scattered free capacity comes together.

    Tries the emptiest nodes first (a bounded number of them); on a node, moves its smallest
    movable workloads until one replica fits, then must place every moved workload elsewhere.
    """
    ledger = session.ledger
    size = session.request_size(claimant)
    if quota_refusal(session, claimant, size) is not None or ledger.free_gpu_total() < size:
        return False
    one = replace(claimant.request, replicas=1)
    mark = ledger.mark()
    movers_by_node: dict[int, list[Workload]] = {}
    for workload in session.running.values():
        if (
            workload.preemptible
            and workload.request.replicas == 1
            and session.protected_until(workload) is None
        ):
            movers_by_node.setdefault(ledger.index[workload.placement[0].node], []).append(workload)
    if not movers_by_node:
        return False
    moved: dict[str, tuple[Workload, Placement]] = {}
    replicas = []
    for _ in range(claimant.request.replicas):
        spot = place(ledger, one, session.policy.scorer)
        if spot is None:
            spot = _consolidate_one(session, one, movers_by_node, moved)
        if spot is None:
            ledger.rollback(mark)
            return False
        replicas.extend(spot)
    if quota_refusal(session, claimant, _placed_size(tuple(replicas))) is not None:
        ledger.rollback(mark)
        return False
    for workload, placement in moved.values():
        if placement != workload.placement:
            session.move(workload, placement, claimant.name)
    session.start(claimant, tuple(replicas))
    return True


def _consolidate_one(
    session: Session,
    one,
    movers_by_node: dict[int, list[Workload]],
    moved: dict[str, tuple[Workload, Placement]],
) -> Placement | None:
    ledger = session.ledger
    nodes = sorted(movers_by_node, key=lambda n: (-sum(ledger.free[n]), n))
    for n in nodes[: session.policy.consolidation_nodes]:
        mark = ledger.mark()
        removed: list[Workload] = []
        spot = None
        movers = sorted(
            (w for w in movers_by_node[n] if w.name not in moved),
            key=lambda w: (session.size(w), w.seq),
        )
        for workload in movers:
            ledger.give_back(
                workload.placement, workload.request.cpu_milli, workload.request.memory_mib
            )
            removed.append(workload)
            spot = session.policy.scorer.choose(ledger, one, [n])
            if spot is not None:
                break
        if spot is None:
            ledger.rollback(mark)
            continue
        ledger.take((spot,), one.cpu_milli, one.memory_mib)
        new_places = []
        for workload in sorted(removed, key=lambda w: (-session.size(w), w.seq)):
            placement = place(ledger, workload.request, session.policy.scorer)
            if placement is None:
                break
            new_places.append((workload, placement))
        else:
            for workload, placement in new_places:
                moved[workload.name] = (workload, placement)
            return (spot,)
        ledger.rollback(mark)
    return None
