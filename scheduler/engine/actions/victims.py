"""The victim search that reclaim and preempt share (rule 4): the running work each queue can
give up, in victim order, the loss bounds a claimant's victims must stay within, and the
trial eviction that finds the fewest victims that make room."""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping, Sequence

from scheduler.common.limits import MILLI
from scheduler.common.placement import Placement
from scheduler.engine import reasons
from scheduler.engine.actions.quota import EPS, quota_refusal
from scheduler.engine.model import EvictReason, Kind, Workload, held_milli
from scheduler.engine.placement import choose, place
from scheduler.engine.session import Session, default_victim_key, recent_first_victim_key


def within_host_deserved(session: Session, workload: Workload) -> bool:
    """Whether its queue stays inside its deserved CPUs and memory with it started."""
    name = workload.queue
    return all(
        r.allocated[name] + r.amount(workload.request) <= r.deserved[name] + EPS
        for r in session.host
    )


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
    if session.use.allocated[home] + size <= session.deserved[home] + EPS and (
        not session.host or within_host_deserved(session, claimant)
    ):
        waited = size / MILLI * max(0.0, session.now - claimant.submitted_at)
        if waited > bound:
            return (bound, waited)
    return (bound,)


class VictimSearch:
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
        self.freed_host: dict[str, dict[str, int]] = {r.key: {} for r in session.host}
        self.freed_host_np: dict[str, dict[str, int]] = {r.key: {} for r in session.host}
        """Per counted host resource (rule 3b), what ``freed``/``freed_np`` are for GPUs."""
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
        self._all_applied_below = 0
        """Speed only: every victim before this index in ``victims`` is applied, so that
        applying all of them (a gang claimant, each step) scans only the new ones."""
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
        for resource in self.session.host:
            amount = sign * resource.amount(victim.request)
            freed = self.freed_host[resource.key]
            freed_np = self.freed_host_np[resource.key]
            for name in self.session.ancestry[victim.queue]:
                freed[name] = freed.get(name, 0) + amount
                if not victim.preemptible:
                    freed_np[name] = freed_np.get(name, 0) + amount

    def admissible(self, placement: Placement) -> bool:
        size = held_milli(placement)
        return (
            quota_refusal(
                self.session,
                self.claimant,
                size,
                self.freed,
                self.freed_np,
                self.freed_host,
                self.freed_host_np,
            )
            is None
        )

    def _capacity(self, nodes: set[int] | None) -> Placement | None:
        """Where the claimant would go now, ignoring quotas; the ledger is left unchanged."""
        ledger = self.session.ledger
        request = self.claimant.request
        account = self.claimant.user
        if request.replicas == 1:
            replica = choose(ledger, request, self.session.policy.scorer, nodes, account)
            return None if replica is None else (replica,)
        mark = ledger.mark()
        placement = place(ledger, request, self.session.policy.scorer, nodes, account)
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
            start = self._all_applied_below
            due = [v for v in self.victims[start:] if v.name not in self._applied]
            self._all_applied_below = len(self.victims)
        else:
            due = [v for n in sorted(nodes) for v in self._unapplied.pop(n, ())]
        ledger = self.session.ledger
        for victim in due:
            if victim.name in self._applied:
                continue  # a gang reached through another of its nodes
            ledger.give_back(
                victim.placement, victim.request.cpu_milli, victim.request.memory_mib, victim.user
            )
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
            ledger.take(
                victim.placement, victim.request.cpu_milli, victim.request.memory_mib, victim.user
            )
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
        self._all_applied_below = 0
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
        self.freed_host = {r.key: {} for r in session.host}
        self.freed_host_np = {r.key: {} for r in session.host}
        mark = session.ledger.mark()
        claimant = self.claimant
        final = place(session.ledger, claimant.request, session.policy.scorer, None, claimant.user)
        if final is None or not self.admissible(final):  # keep the fit the search proved
            session.ledger.rollback(mark)
            request = claimant.request
            session.ledger.take(placement, request.cpu_milli, request.memory_mib, claimant.user)
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
        self._filtered: dict[str, Filtered] = {}
        """Per queue: its unprotected candidates and their work at risk (``Filtered``)."""
        self._over_bound: dict[tuple[str, float | None], bool] = {}
        self._alive_from: dict[tuple[str, float | None], int] = {}
        # static while the lists are (same queues, same queues with victims): kept with the
        # lists, so the forks sharing them share these too (read-only)
        self._sides: dict[str, dict[str, tuple[str, str]]] = getattr(self.sorted_lists, "sides", {})
        self._groups: dict[str, tuple[dict[str, list[str]], list[tuple]]] = getattr(
            self.sorted_lists, "groups", {}
        )
        self.ordered_by_priority = session.policy.victim_key in (
            default_victim_key,
            recent_first_victim_key,
        )
        self.reclaim_failed: dict[tuple, str] = {}
        self.floors = {
            name: min(session.fair.get(name, 0.0), session.deserved[name]) + EPS
            for name in session.queues
        }
        """Per queue: the allocation above which reclaim may take from it at all (above its
        fair share or its deserved quota; both are fixed for the cycle)."""
        self.over_fair = {name: session.fair.get(name, 0.0) + EPS for name in session.queues}
        self.over_deserved = {name: session.deserved[name] + EPS for name in session.queues}
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
            filtered = self._filter(queue)
            if bound is None:
                usable = filtered.usable
            else:
                usable = filtered.within(self.session, bound)
                self._over_bound[key] = len(usable) < len(filtered.usable)
            self._usable[key] = usable
            self._alive_from[key] = 0
        return self._usable[key]

    def _filter(self, queue: str) -> Filtered:
        """The queue's ``Filtered`` for this cycle: the one its victim lists keep (shared
        by the forks of a settled session, so a notebook's decision does not filter the
        same candidates again) when every candidate's running workload and ``now`` are
        still those it was made from, else a new one."""
        filtered = self._filtered.get(queue)
        if filtered is None:
            session = self.session
            shared = getattr(self.sorted_lists, "filtered", None)
            kept = None if shared is None else shared.get(queue)
            if kept is not None and kept.still(session.now, session.running):
                filtered = kept
            else:
                filtered = Filtered(session, self.sorted_lists.get(queue, ()))
                if shared is not None:
                    shared[queue] = filtered
            self._filtered[queue] = filtered
        return filtered

    def walk(
        self, queue: str, search: VictimSearch, below_priority: int | None = None
    ) -> Iterator[Workload]:
        """The queue's victims in order: running, unprotected, within the search's loss bound,
        (optionally) lower priority."""
        key = (queue, search.bound)
        candidates = self._usable_in(queue, search.bound)
        protected = self._filtered[queue].earliest
        if protected is not None:
            search.note_protected(protected)
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


class Filtered:
    """One queue's candidates filtered at one ``now``: those running and unprotected, in
    victim order, the earliest end of a protection among the others, and (once a loss bound
    asks) the work at risk of each. Each depends only on the workload objects running under
    the candidates' names, their placed sizes (fixed per object) and ``now``, so it serves
    any session that sees the same objects at the same ``now`` (``Candidates._filter``)."""

    def __init__(self, session: Session, candidates: Sequence[Workload]) -> None:
        self.now = session.now
        self.names = [candidate.name for candidate in candidates]
        self.seen = list(map(session.running.get, self.names))
        """The workload running under each candidate's name (None: none) when it was made."""
        self.usable: list[Workload] = []
        self.earliest: float | None = None
        for workload in self.seen:
            if workload is None:
                continue
            until = session.protected_until(workload)
            if until is None:
                self.usable.append(workload)
            elif self.earliest is None or until < self.earliest:
                self.earliest = until
        self.risks: list[float] | None = None
        """The work at risk of each of ``usable``, in list order."""
        self._ranked: list[float] = []
        self._within_count: dict[int, list[Workload]] = {}
        """Speed only (``within``): the risks sorted; per count of risks within a bound, the
        candidates within it."""

    def still(self, now: float, running: Mapping[str, Workload]) -> bool:
        """Whether this filter holds at ``now`` for a session running ``running``: the same
        workloads (the same objects, or equal ones, which filter the same) under every
        candidate's name. (In C, map and list equality: a notebook's decision checks
        thousands of candidates.)"""
        return now == self.now and list(map(running.get, self.names)) == self.seen

    def within(self, session: Session, bound: float) -> list[Workload]:
        """The candidates whose work at risk is within ``bound``, in list order. A training
        claimant's second bound is its own wait, so nearly every claimant brings a new bound;
        but two bounds that pass the same number of (sorted) risks pass the same candidates,
        so the list is filtered once per such count, not once per bound (read-only, shared)."""
        risks = self.risks
        if risks is None:  # once per queue, not once per queue and bound
            at_risk = session.at_risk
            risks = self.risks = [at_risk(w) for w in self.usable]
            self._ranked = sorted(risks)
        count = bisect.bisect_right(self._ranked, bound)
        usable = self._within_count.get(count)
        if usable is None:
            usable = [w for w, risk in zip(self.usable, risks, strict=True) if risk <= bound]
            self._within_count[count] = usable
        return usable


def shape_key(session: Session, workload: Workload) -> tuple:
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
        # one account per GPU: another account's claimant may find other GPUs
        workload.user if session.ledger.accounts is not None else None,
    )


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
