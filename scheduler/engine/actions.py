"""The cycle's actions: start, consolidate, reclaim, preempt (docs/scheduling.md, rules 3-7).

Each action works on a ``Session`` and tries one pending workload at a time on
the ledger, keeping an attempt only if the workload starts. ``try_start`` uses
idle capacity only; the three others evict or move running work, and run only
for a workload that ``try_start`` could not place, at its turn in service order.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from scheduler.common.limits import MILLI
from scheduler.common.placement import Placement
from scheduler.engine import reasons
from scheduler.engine.model import EvictReason, Kind, Workload, held_milli
from scheduler.engine.placement import fits_somewhere_ever, place
from scheduler.engine.session import (
    QueueStanding,
    Session,
    default_victim_key,
    recent_first_victim_key,
)

_EPS = 1e-6


@dataclass
class Outcome:
    """Why a workload could not start in this cycle (None when it started)."""

    reason: str
    capacity: bool
    """True when only free capacity was missing, so evictions might help."""
    limit_blocked: bool = False
    """True when a limit refused it: preempting the queue's own lower-priority work can help.
    (Nothing can help a non-preemptible workload beyond its deserved quota: victims are
    always preemptible, so evicting them frees none of that quota.)"""


# -- quota checks -------------------------------------------------------------------------


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
        if queue.limit_gpus is not None and used + size > queue.limit_gpus * MILLI + _EPS:
            return reasons.at_limit(session, name, used, size)
        if not workload.preemptible:
            used_np = session.use.non_preemptible[name] - freed_np.get(name, 0)
            if used_np + size > session.deserved[name] + _EPS:
                return reasons.beyond_deserved(session, name, workload, used_np, size)
    return None


# -- idle capacity ------------------------------------------------------------------------


@dataclass
class Failures:
    """Request shapes that found no idle room. Idle capacity only shrinks until an eviction
    frees some (the cycle then clears this), so meanwhile any request at least as large fails
    too and need not be placed again, if it may use no GPU model the failed one could not."""

    shapes: list[tuple[bool, int, int, int, int, frozenset[str]]] = field(default_factory=list)

    @staticmethod
    def shape(workload: Workload) -> tuple[bool, int, int, int, int, frozenset[str]] | None:
        request = workload.request
        if request.gpu_memory_mib is not None:
            return None
        size = request.whole_gpus * MILLI if request.whole_gpus else round(request.gpus * MILLI)
        return (
            request.is_fraction,
            size,
            request.replicas,
            request.cpu_milli,
            request.memory_mib,
            request.gpu_models,
        )

    def known(self, shape: tuple[bool, int, int, int, int, frozenset[str]] | None) -> bool:
        return shape is not None and any(
            failed[0] == shape[0]
            and all(a >= b for a, b in zip(shape[1:5], failed[1:5], strict=True))
            and (not failed[5] or (shape[5] and shape[5] <= failed[5]))
            for failed in self.shapes
        )


class ServiceOrder:
    """Pending work in rule 7's order, kept current as the cycle changes allocations.

    Queues first whose allocation with their next workload stays inside the deserved quota, then
    higher queue priority, then the most starved queue (allocated / fair share), then workload
    priority and submission time. A heap holds one entry per queue; a queue's entry is re-keyed
    when it starts something, and ``touch`` re-keys the queues that evictions took from.
    """

    def __init__(self, session: Session, pending: list[Workload]) -> None:
        self.session = session
        self.by_queue: dict[str, list[Workload]] = {}
        for workload in sorted(pending, key=session.policy.workload_key):
            self.by_queue.setdefault(workload.queue, []).append(workload)
        self.heads = dict.fromkeys(self.by_queue, 0)
        self.version = dict.fromkeys(self.by_queue, 0)
        self.heap = [(self._key(name), 0, name) for name in self.by_queue]
        heapq.heapify(self.heap)

    def _key(self, name: str) -> tuple:
        session = self.session
        head = self.by_queue[name][self.heads[name]]
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

    def _push(self, name: str) -> None:
        self.version[name] += 1
        heapq.heappush(self.heap, (self._key(name), self.version[name], name))

    def touch(self, queues: Iterable[str]) -> None:
        """Re-key these queues: evictions changed their allocation."""
        for name in queues:
            if name in self.by_queue and self.heads[name] < len(self.by_queue[name]):
                self._push(name)

    def __iter__(self) -> Iterator[Workload]:
        while self.heap:
            _, version, name = heapq.heappop(self.heap)
            if version != self.version[name]:
                continue  # superseded by a newer key
            workload = self.by_queue[name][self.heads[name]]
            self.heads[name] += 1  # first, so that a touch while it is served sees the next
            yield workload
            if self.heads[name] < len(self.by_queue[name]):
                self._push(name)  # keyed after the workload's outcome changed the queue


def try_start(
    session: Session, workload: Workload, failures: Failures | None = None
) -> Outcome | None:
    size = session.request_size(workload)
    refusal = quota_refusal(session, workload, size)
    if refusal is not None:
        return Outcome(refusal, capacity=False, limit_blocked=_limited(session, workload, size))
    shape = Failures.shape(workload)
    if failures is not None and failures.known(shape):
        return _no_room(session, workload)
    mark = session.ledger.mark()
    placement = place(session.ledger, workload.request, session.policy.scorer)
    if placement is None:
        if failures is not None and shape is not None:
            failures.shapes.append(shape)
        return _no_room(session, workload)
    actual = held_milli(placement)
    if actual != size:  # a memory request landed on a smaller GPU: check again, exactly
        refusal = quota_refusal(session, workload, actual)
        if refusal is not None:
            session.ledger.rollback(mark)
            return Outcome(refusal, capacity=False, limit_blocked=_limited(session, workload, size))
    session.start(workload, placement)
    return None


def _limited(session: Session, workload: Workload, size: int) -> bool:
    """Whether a limit (rather than only the non-preemptible quota) refuses this size."""
    return any(
        session.queues[name].limit_gpus is not None
        and session.use.allocated[name] + size > session.queues[name].limit_gpus * MILLI + _EPS
        for name in session.ancestry[workload.queue]
    )


def _no_room(session: Session, workload: Workload) -> Outcome:
    """Capacity is missing; evictions can only help if an empty node could hold it."""
    ever = fits_somewhere_ever(session.ledger.shapes_for(workload.request), workload.request)
    return Outcome(reasons.no_room(session, workload), capacity=ever)


# -- evictions: shared search -------------------------------------------------------------


def loss_bounds_for(session: Session, claimant: Workload) -> tuple[float | None, ...]:
    """The most work at risk (GPU-seconds) one victim of ``claimant`` may lose, tier by tier:
    the search tries each in turn and keeps the first that makes room.

    ``Policy.loss_bound`` first, for everyone. A notebook is owed its capacity now: when no
    victims within the bound make room, it may take any (a second tier without bound). A
    training claimant inside its queue's deserved quota is owed it too, but not at any
    price at once: its second tier is the work it has waited for, its GPUs times the time
    since it was submitted. So a borrower's long unsaved run is not thrown away for a job
    that would have waited minutes, and still no borrower keeps a quota's GPUs for long by
    never saving (docs/scheduling.md, "Work at risk")."""
    bound = session.policy.loss_bound
    if bound is None:
        return (None,)
    if claimant.kind is Kind.INTERACTIVE:
        return (bound, None)
    home = claimant.queue
    size = session.request_size(claimant)
    if session.use.allocated[home] + size <= session.deserved[home] + _EPS:
        waited = size / MILLI * max(0.0, session.now - claimant.submitted_at)
        if waited > bound:
            return (bound, waited)
    return (bound,)


class _Search:
    """Victims given back on the ledger one at a time until the claimant fits, then trimmed.

    Before the first fit only the newest victim's nodes can have become a fit (every other
    node already failed and has not changed), so a single-replica claimant is tried on those
    nodes alone. Victims only ever add capacity, so once a fit exists it stays one; if a quota
    refused it, later steps only re-check the quota against more freed capacity.
    """

    def __init__(self, session: Session, claimant: Workload, bound: float | None) -> None:
        self.session = session
        self.claimant = claimant
        self.victims: list[Workload] = []
        self.freed: dict[str, int] = {}
        self.freed_np: dict[str, int] = {}
        self.protected_until: float | None = None
        self.bound = bound
        """Victims with more work at risk than this are passed over (None: no bound)."""
        self.over_bound = False
        """Whether the walk passed over a victim for its work at risk (for the reason)."""
        self.mark = session.ledger.mark()
        self._fit: Placement | None = None
        self._tallied: dict[int, tuple[list[int], list[int]]] = {}
        self._unapplied: dict[int, list[Workload]] = {}
        self._applied: set[str] = set()
        self._could_fit: set[int] | None = set()
        """Nodes where the claimant can fit (None: anywhere): the nodes of the step that first
        made a fit and of every victim after it. Others failed once and have not changed."""

    def note_protected(self, until: float) -> None:
        if self.protected_until is None or until < self.protected_until:
            self.protected_until = until

    def _account(self, victim: Workload, sign: int) -> None:
        size = sign * self.session.size(victim)
        for name in self.session.ancestry[victim.queue]:
            self.freed[name] = self.freed.get(name, 0) + size
            if not victim.preemptible:
                self.freed_np[name] = self.freed_np.get(name, 0) + size

    def admissible(self, placement: Placement) -> bool:
        size = held_milli(placement)
        return quota_refusal(self.session, self.claimant, size, self.freed, self.freed_np) is None

    def _capacity(self, nodes: set[int] | None) -> Placement | None:
        """Where the claimant would go now, ignoring quotas; the ledger is left unchanged."""
        ledger = self.session.ledger
        request = self.claimant.request
        if request.replicas == 1:
            replica = self.session.policy.scorer.choose(ledger, request, nodes)
            return None if replica is None else (replica,)
        mark = ledger.mark()
        placement = place(ledger, request, self.session.policy.scorer, nodes)
        ledger.rollback(mark)
        return placement

    def add(self, victim: Workload) -> Placement | None:
        """Evict ``victim`` on trial; the claimant's placement if it may start now.

        Victims are first only tallied per node; the ledger sees a victim once one of its
        nodes could hold the claimant (and from then on, everything on that node). Most of
        the victims a long walk passes are never applied, which spares two ledger updates
        each. Nodes outside ``_could_fit`` are never consulted, so they may lag.
        """
        self.victims.append(victim)
        self._account(victim, +1)
        ledger = self.session.ledger
        nodes = {ledger.index[r.node] for r in victim.placement}
        self._tally(victim, +1)
        if self.claimant.request.replicas > 1:
            self._could_fit = None
        if self._could_fit is None:
            self._apply(None)
        elif self._fit is None:
            if not self._opens_room(nodes):
                return None
            self._apply(nodes)
        else:
            self._could_fit |= nodes
            self._apply(nodes)
        if self._fit is None:
            self._fit = self._capacity(None if self._could_fit is None else nodes)
            if self._fit is None:
                return None
            if self._could_fit is not None:
                self._could_fit = set(nodes)
        return self._fit if self.admissible(self._fit) else None

    def _tally(self, victim: Workload, sign: int) -> None:
        ledger = self.session.ledger
        request = victim.request
        for replica in victim.placement:
            n = ledger.index[replica.node]
            gpus, host = self._tallied.setdefault(n, ([0] * len(ledger.free[n]), [0, 0]))
            for share in replica.gpus:
                gpus[share.index] += sign * share.milli
            host[0] += sign * request.cpu_milli
            host[1] += sign * request.memory_mib
            if sign > 0:
                self._unapplied.setdefault(n, []).append(victim)

    def _apply(self, nodes: set[int] | None) -> None:
        """Give back on the ledger every tallied victim on ``nodes`` (None: all of them)."""
        if nodes is None:
            due = [v for v in self.victims if v.name not in self._applied]
        else:
            due = [v for n in sorted(nodes) for v in self._unapplied.pop(n, ())]
        ledger = self.session.ledger
        for victim in due:
            if victim.name in self._applied:
                continue  # a gang reached through another of its nodes
            ledger.give_back(victim.placement, victim.request.cpu_milli, victim.request.memory_mib)
            self._applied.add(victim.name)
            self._tally(victim, -1)
        if nodes is None:
            self._unapplied.clear()

    def _opens_room(self, nodes: set[int]) -> bool:
        """Cheap necessary test before asking the scorer: with the tallied victims gone, is
        there room of the claimant's shape on these nodes? (Only they changed since the last
        try.)"""
        ledger = self.session.ledger
        request = self.claimant.request
        if request.gpu_memory_mib is not None:
            return True  # its share depends on the GPU; let the scorer judge
        need = MILLI if request.whole_gpus else round(request.gpus * MILLI)  # per GPU
        count = max(request.whole_gpus, 1)
        for n in nodes:
            if not request.allows(ledger.nodes[n].gpu_model):
                continue
            gpus, host = self._tallied[n]
            cpu, mem = ledger.cpu_free[n], ledger.mem_free[n]
            if cpu is not None and cpu + host[0] < request.cpu_milli:
                continue
            if mem is not None and mem + host[1] < request.memory_mib:
                continue
            room = 0
            for free, back in zip(ledger.free[n], gpus, strict=True):
                if free + back >= need:
                    room += 1
                    if room >= count:
                        return True
        return False

    def trim(self, placement: Placement) -> Placement:
        """Drop every victim the fit does not need, the one with the most work at risk first,
        so the set evicted destroys as little as it can; returns a fit that holds without the
        dropped ones. The kept victims stay in the order they were taken (rule 4)."""
        ledger = self.session.ledger
        home_levels = set(self.session.ancestry[self.claimant.queue])
        victims = self.victims
        # victims never given back on the ledger can only matter to a quota: first, as taken;
        # then those the fit may use, the costliest first
        order = [i for i, victim in enumerate(victims) if victim.name not in self._applied]
        applied = [i for i, victim in enumerate(victims) if victim.name in self._applied]
        if len(applied) > 1:
            risk = {i: self.session.at_risk(victims[i]) for i in applied}
            applied.sort(key=lambda i: (-risk[i], i))
        order += applied
        kept_at: list[int] = []
        for i in order:
            victim = victims[i]
            if victim.name not in self._applied:
                # on nodes the claimant cannot use: only a quota could need it
                self._account(victim, -1)
                if not self.admissible(placement):
                    self._account(victim, +1)
                    kept_at.append(i)
                continue
            nodes = {ledger.index[r.node] for r in victim.placement}
            if (
                self._could_fit is not None
                and nodes.isdisjoint(self._could_fit)
                and home_levels.isdisjoint(self.session.ancestry[victim.queue])
            ):
                # neither the claimant's possible spots nor its quotas can see this victim
                self._account(victim, -1)
                continue
            mark = ledger.mark()
            ledger.take(victim.placement, victim.request.cpu_milli, victim.request.memory_mib)
            self._account(victim, -1)
            untouched = {r.node for r in victim.placement}.isdisjoint(r.node for r in placement)
            if untouched and self.admissible(placement):
                continue  # the fit we have does not use anything the victim held
            found = self._capacity(self._could_fit)
            if found is not None and self.admissible(found):
                placement = found
                continue
            ledger.rollback(mark)
            self._account(victim, +1)
            kept_at.append(i)
        self.victims = [victims[i] for i in sorted(kept_at)]
        return placement

    def abandon(self) -> None:
        self.session.ledger.rollback(self.mark)

    def give_up(self, failures: dict[tuple, str], memo: tuple) -> str:
        """Undo the trial, remember the failure for the cycle, and return what to add to the
        claimant's pending reason."""
        self.abandon()
        suffix = ""
        if self.protected_until is not None:
            suffix = reasons.protected(self.session, self.protected_until)
        if self.over_bound and self.bound is not None:
            waited = self.bound != self.session.policy.loss_bound
            suffix += reasons.over_loss_bound(self.bound, waited)
        failures[memo] = suffix
        return suffix

    def commit(self, placement: Placement, reason: EvictReason) -> None:
        placement = self.trim(placement)
        self.abandon()
        session = self.session
        for victim in self.victims:
            session.evict(victim, reason, self.claimant.name)
        self.freed, self.freed_np = {}, {}  # the session's accounting has them gone now
        mark = session.ledger.mark()
        final = place(session.ledger, self.claimant.request, session.policy.scorer)
        if final is None or not self.admissible(final):  # keep the fit the search proved
            session.ledger.rollback(mark)
            session.ledger.take(
                placement, self.claimant.request.cpu_milli, self.claimant.request.memory_mib
            )
            final = placement
        session.start(self.claimant, final)


class Candidates:
    """Running preemptible work per queue in victim order (rule 4), built once per cycle.

    A queue's list is filtered on first use: work protected by min_runtime is set aside (with
    the earliest end of its protection, for the pending reason), since nothing in one cycle
    ends a protection. Further lists per queue and loss bound keep only the work within it
    (work at risk does not change within a cycle either).
    Workloads evicted during the cycle are skipped for good; moved ones are looked up again so
    the victim is always the workload as it runs now. Work started in this cycle is never a
    victim in the same cycle.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self.sorted_lists = session.victim_lists()
        self._usable: dict[tuple[str, float | None], list[Workload]] = {}
        self._protected: dict[str, float | None] = {}
        self._over_bound: dict[tuple[str, float | None], bool] = {}
        self._alive_from: dict[tuple[str, float | None], int] = {}
        self._risks: dict[str, list[float]] = {}
        """Per queue: the work at risk of each unprotected candidate, in list order."""
        self._sides: dict[str, dict[str, tuple[str, str]]] = {}
        self._groups: dict[str, tuple[dict[str, list[str]], list[tuple]]] = {}
        self.ordered_by_priority = session.policy.victim_key in (
            default_victim_key,
            recent_first_victim_key,
        )
        self.reclaim_failed: dict[tuple, str] = {}
        self.floors = {
            name: min(session.fair.get(name, 0.0), session.deserved[name]) + _EPS
            for name in session.queues
        }
        """Per queue: the allocation above which reclaim may take from it at all (above its
        fair share or its deserved quota; both are fixed for the cycle)."""
        self.over_fair = {name: session.fair.get(name, 0.0) + _EPS for name in session.queues}
        self.over_deserved = {name: session.deserved[name] + _EPS for name in session.queues}
        """Per queue: the allocation above which it is over its fair share, its deserved quota
        (speed only, for ``_reclaim_entries``)."""
        self.preempt_failed: dict[tuple, str] = {}
        self.consolidate_failed: set[tuple] = set()

    def sides_for(self, claimer: str) -> dict[str, tuple[str, str]]:
        """For every other queue with victims: the two siblings under the lowest common
        ancestor of ``claimer`` and that queue (static for the cycle, so computed once)."""
        if claimer not in self._sides:
            self._sides[claimer] = {
                name: _sides(self.session, claimer, name)
                for name in self.sorted_lists
                if name != claimer
            }
        return self._sides[claimer]

    def groups_for(self, claimer: str) -> tuple[dict[str, list[str]], list[tuple]]:
        """Speed only, static for the cycle: the claimer's branch from its queue up to each
        sibling ``mine`` of ``sides_for``, and the queues with victims grouped by their
        (mine, theirs) siblings, so that reclaim can skip a group at once."""
        if claimer not in self._groups:
            sides = self.sides_for(claimer)
            chain = self.session.ancestry[claimer]
            branch = {mine: chain[: chain.index(mine) + 1] for mine, _ in sides.values()}
            grouped: dict[tuple[str, str], list[str]] = {}
            for name, pair in sides.items():
                grouped.setdefault(pair, []).append(name)
            groups = [(mine, theirs, names) for (mine, theirs), names in grouped.items()]
            self._groups[claimer] = (branch, groups)
        return self._groups[claimer]

    def _usable_in(self, queue: str, bound: float | None) -> list[Workload]:
        """The queue's unprotected candidates; with a ``bound``, only those within it (work
        at risk is fixed for the cycle: ``now`` does not move, and work started or moved in
        the cycle is never a victim)."""
        key = (queue, bound)
        if key not in self._usable:
            if bound is None:
                usable, earliest = [], None
                for candidate in self.sorted_lists.get(queue, ()):
                    workload = self.session.running.get(candidate.name)
                    if workload is None:
                        continue
                    until = self.session.protected_until(workload)
                    if until is None:
                        usable.append(workload)
                    elif earliest is None or until < earliest:
                        earliest = until
                self._protected[queue] = earliest
            else:
                everything = self._usable_in(queue, None)
                risks = self._risks.get(queue)
                if risks is None:  # once per queue, not once per queue and bound
                    at_risk = self.session.at_risk
                    risks = self._risks[queue] = [at_risk(w) for w in everything]
                usable = [w for w, risk in zip(everything, risks, strict=True) if risk <= bound]
                self._over_bound[key] = len(usable) < len(everything)
            self._usable[key] = usable
            self._alive_from[key] = 0
        return self._usable[key]

    def walk(
        self, queue: str, search: _Search, below_priority: int | None = None
    ) -> Iterator[Workload]:
        """The queue's victims in order: running, unprotected, within the search's loss bound,
        (optionally) lower priority."""
        key = (queue, search.bound)
        candidates = self._usable_in(queue, search.bound)
        if self._protected[queue] is not None:
            search.note_protected(self._protected[queue])
        if search.bound is not None and self._over_bound[key]:
            search.over_bound = True
        running = self.session.running
        i = self._alive_from[key]
        while i < len(candidates) and candidates[i].name not in running:
            i += 1
        self._alive_from[key] = i
        first_new = self.session.first_new_start
        for j in range(i, len(candidates)):
            workload = running.get(candidates[j].name)
            if workload is None or workload.start_seq >= first_new:
                continue
            if below_priority is not None and workload.priority >= below_priority:
                if self.ordered_by_priority:
                    return  # lowest priority first: nothing lower follows
                continue
            yield workload


def _shape_key(session: Session, workload: Workload) -> tuple:
    """What a failed make-room search is remembered by for the cycle: everything about the
    claimant the search reads besides its queue, priority and loss bound (the callers add
    those), so that a claimant the search would treat differently never inherits the
    failure."""
    request = workload.request
    return (
        session.request_size(workload),
        request.whole_gpus,
        request.replicas,
        request.gpu_memory_mib,
        request.cpu_milli,
        request.memory_mib,
        request.gpu_models,
        workload.preemptible,
    )


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


def reclaim(session: Session, claimant: Workload, candidates: Candidates) -> tuple[bool, str]:
    """Take back capacity from queues above their fair share (or above deserved, for a claimant
    inside its own deserved quota). Returns whether the claimant started, and if not, what to
    add to its pending reason."""
    size = session.request_size(claimant)
    home = claimant.queue
    if session.use.allocated[home] + size > session.fair.get(home, 0.0) + _EPS:
        return False, reasons.over_fair_share(session, claimant)
    suffix = ""
    for bound in loss_bounds_for(session, claimant):
        memo = (home, _shape_key(session, claimant), bound)
        if memo in candidates.reclaim_failed:
            suffix = candidates.reclaim_failed[memo]
            continue
        search = _Search(session, claimant, bound)
        started, suffix = _reclaim_within(session, claimant, candidates, search, memo)
        if started:
            return True, ""
        if not search.over_bound:
            break  # the bound passed nobody over: without it the search would be the same
    return False, suffix


def _reclaim_within(
    session: Session, claimant: Workload, candidates: Candidates, search: _Search, memo: tuple
) -> tuple[bool, str]:
    """One reclaim search, its victims within ``search.bound``."""
    size = session.request_size(claimant)
    home = claimant.queue
    used = session.use.allocated
    fair = session.fair

    def after(name: str) -> float:
        return used[name] - search.freed.get(name, 0)

    sides = candidates.sides_for(home)
    # The claimant's side is judged on its own branch under the common ancestor with the
    # victim: from its queue up to `mine`. Levels above are shared, so a reclaim between two
    # projects of one department never needs that department to shrink first.
    branch, groups = candidates.groups_for(home)
    fair_with_it = {
        mine: all(used[level] + size <= fair.get(level, 0.0) + _EPS for level in levels)
        for mine, levels in branch.items()
    }
    deserved_with_it = {
        mine: all(used[level] + size <= session.deserved[level] + _EPS for level in levels)
        for mine, levels in branch.items()
    }

    def eligible(name: str) -> bool:
        mine, theirs = sides[name]
        if not fair_with_it[mine]:
            return False
        if (
            after(name) > fair.get(name, 0.0) + _EPS
            and after(theirs) > fair.get(theirs, 0.0) + _EPS
        ):
            return True
        return (
            deserved_with_it[mine]
            and after(name) > session.deserved[name] + _EPS
            and after(theirs) > session.deserved[theirs] + _EPS
        )

    def ratio(name: str) -> float:
        share = fair.get(name, 0.0)
        return after(name) / share if share > _EPS else float("inf")

    mine_ratio = (used[home] + size) / max(fair.get(home, 0.0), _EPS)

    def stays_ahead(name: str, victim: Workload) -> bool:
        """Beyond its deserved quota, a claimant may only take from a queue that keeps at
        least its own share ratio afterwards. Otherwise the victim's queue, now the poorer
        one, takes the capacity back when the grace period ends, and the two trade it
        forever (sum of allocated²/fair falls with every allowed reclaim, so cycles end)."""
        left = after(name) - session._placed_size[victim.name]
        share = fair.get(name, 0.0)
        return share <= _EPS or left / share + _EPS >= mine_ratio

    walks: dict[str, Iterator[Workload]] = {}
    floors = candidates.floors  # a necessary condition first: most queues are below it
    if session.policy.reclaim_groups:
        # the same entries (each key is unique, so the heap pops in the same order): a group
        # is left out only where `eligible` is false for all of it, with nothing freed yet
        heap = _reclaim_entries(session, candidates, groups, fair_with_it, deserved_with_it)
    else:
        heap = [
            (-ratio(name), session.queue_order[name], name)
            for name in sides
            if used[name] > floors[name] and eligible(name)
        ]
    heapq.heapify(heap)
    while heap:
        _, order, name = heapq.heappop(heap)
        if not eligible(name):
            continue  # only falls as victims go, so it never comes back
        if name not in walks:
            walks[name] = candidates.walk(name, search)
        victim = next(walks[name], None)
        if victim is None:
            continue
        if not deserved_with_it[sides[name][0]] and not stays_ahead(name, victim):
            heapq.heappush(heap, (-ratio(name), order, name))
            continue
        placement = search.add(victim)
        if placement is not None:
            search.commit(placement, EvictReason.RECLAIM)
            return True, ""
        heapq.heappush(heap, (-ratio(name), order, name))
    return False, search.give_up(candidates.reclaim_failed, memo)


def _reclaim_entries(
    session: Session,
    candidates: Candidates,
    groups: list[tuple],
    fair_with_it: dict[str, bool],
    deserved_with_it: dict[str, bool],
) -> list[tuple[float, int, str]]:
    """Speed only: the heap entries ``reclaim`` builds from every queue that ``eligible``
    accepts with nothing freed yet, the same test written out per group so that a group
    none of whose queues can qualify is passed over at once (``Policy.reclaim_groups``)."""
    used, fair, order = session.use.allocated, session.fair, session.queue_order
    over_fair, over_deserved = candidates.over_fair, candidates.over_deserved
    entries = []
    for mine, theirs, names in groups:
        if not fair_with_it[mine]:
            continue
        by_fair = used[theirs] > over_fair[theirs]
        by_deserved = deserved_with_it[mine] and used[theirs] > over_deserved[theirs]
        if not (by_fair or by_deserved):
            continue
        for name in names:
            allocated = used[name]
            if (by_fair and allocated > over_fair[name]) or (
                by_deserved and allocated > over_deserved[name]
            ):
                share = fair.get(name, 0.0)
                ratio = allocated / share if share > _EPS else float("inf")
                entries.append((-ratio, order[name], name))
    return entries


# -- preempt ------------------------------------------------------------------------------


def preempt(session: Session, claimant: Workload, candidates: Candidates) -> tuple[bool, str]:
    """Evict lower-priority preemptible work of the claimant's own queue; equal never preempts."""
    suffix = ""
    for bound in loss_bounds_for(session, claimant):
        memo = (claimant.queue, claimant.priority, _shape_key(session, claimant), bound)
        if memo in candidates.preempt_failed:
            suffix = candidates.preempt_failed[memo]
            continue
        search = _Search(session, claimant, bound)
        for victim in candidates.walk(claimant.queue, search, below_priority=claimant.priority):
            placement = search.add(victim)
            if placement is not None:
                search.commit(placement, EvictReason.PREEMPT)
                return True, ""
        suffix = search.give_up(candidates.preempt_failed, memo)
        if not search.over_bound:
            break  # the bound passed nobody over: without it the search would be the same
    return False, suffix


# -- consolidate --------------------------------------------------------------------------


def consolidate(session: Session, claimant: Workload, candidates: Candidates) -> bool:
    """Move preemptible single-replica work so that scattered free capacity comes together.

    Tries the emptiest nodes first (a bounded number of them); on a node, moves the movable
    workloads with the least work at risk until one replica fits, then must place every moved
    workload elsewhere. Work over ``Policy.loss_bound`` is never moved, whoever the claimant.
    A request shape that could not be consolidated is not tried again in the same cycle.
    """
    ledger = session.ledger
    size = session.request_size(claimant)
    if quota_refusal(session, claimant, size) is not None or ledger.total_free < size:
        return False
    memo = _shape_key(session, claimant)
    if memo in candidates.consolidate_failed:
        return False
    one = replace(claimant.request, replicas=1)
    mark = ledger.mark()
    moved: dict[str, tuple[Workload, Placement]] = {}
    replicas: list = []
    for _ in range(claimant.request.replicas):
        spot = place(ledger, one, session.policy.scorer)
        if spot is None:
            spot = _consolidate_one(session, one, moved)
        if spot is None:
            ledger.rollback(mark)
            candidates.consolidate_failed.add(memo)
            return False
        replicas.extend(spot)
    if quota_refusal(session, claimant, held_milli(tuple(replicas))) is not None:
        ledger.rollback(mark)
        return False
    for workload, placement in moved.values():
        if placement != workload.placement:
            session.move(workload, placement, claimant.name)
    session.start(claimant, tuple(replicas))
    return True


def _movers_on(session: Session, n: int, moved: dict) -> list[Workload]:
    """Work consolidation may move off node ``n``, least work at risk first: preemptible,
    single-replica, not protected by min_runtime, and losing at most ``Policy.loss_bound``."""
    bound = session.policy.loss_bound
    movers = [
        w
        for w in session.on_node(session.ledger.nodes[n].name)
        if w.preemptible
        and w.request.replicas == 1
        and w.name not in moved
        and w.start_seq < session.first_new_start
        and session.protected_until(w) is None
        and (bound is None or session.at_risk(w) <= bound)
    ]
    movers.sort(key=lambda w: (session.at_risk(w), session.size(w), w.seq))
    return movers


def _move_fits_quota(session: Session, workload: Workload, placement: Placement) -> bool:
    """A memory request moved to a smaller GPU grows; its queue's limits must still hold."""
    old, new = session.size(workload), held_milli(placement)
    if new <= old:
        return True
    freed = dict.fromkeys(session.ancestry[workload.queue], old)
    freed_np = {} if workload.preemptible else freed
    return quota_refusal(session, workload, new, freed, freed_np) is None


def _consolidate_one(
    session: Session, one, moved: dict[str, tuple[Workload, Placement]]
) -> Placement | None:
    ledger = session.ledger
    emptiest = heapq.nsmallest(
        session.policy.consolidation_nodes,
        (n for n in range(len(ledger.nodes)) if ledger.nodes[n].gpus),
        key=lambda n: (-sum(ledger.free[n]), n),
    )
    for n in emptiest:
        movers = _movers_on(session, n, moved)
        if not movers:
            continue
        mark = ledger.mark()
        removed: list[Workload] = []
        spot = None
        for workload in movers:
            ledger.give_back(
                workload.placement, workload.request.cpu_milli, workload.request.memory_mib
            )
            removed.append(workload)
            spot = session.policy.scorer.choose(ledger, one, {n})
            if spot is not None:
                break
        if spot is None:
            ledger.rollback(mark)
            continue
        ledger.take((spot,), one.cpu_milli, one.memory_mib)
        new_places = []
        for workload in sorted(removed, key=lambda w: (-session.size(w), w.seq)):
            placement = place(ledger, workload.request, session.policy.scorer)
            if placement is None or not _move_fits_quota(session, workload, placement):
                break
            new_places.append((workload, placement))
        else:
            for workload, placement in new_places:
                moved[workload.name] = (workload, placement)
            return (spot,)
        ledger.rollback(mark)
    return None
