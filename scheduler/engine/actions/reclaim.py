"""Rule 4 across queues: take back capacity from queues above their fair share."""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from scheduler.engine import reasons
from scheduler.engine.actions.quota import EPS
from scheduler.engine.actions.victims import (
    Candidates,
    VictimSearch,
    loss_bounds_for,
    shape_key,
)
from scheduler.engine.model import EvictReason, Workload
from scheduler.engine.resources import share_ratio
from scheduler.engine.session import Session


def reclaim(session: Session, claimant: Workload, candidates: Candidates) -> tuple[bool, str]:
    """Take back capacity from queues above their fair share (or above deserved, for a claimant
    inside its own deserved quota). Returns whether the claimant started, and if not, what to
    add to its pending reason."""
    size = session.request_size(claimant)
    home = claimant.queue
    if session.use.allocated[home] + size > session.fair.get(home, 0.0) + EPS:
        return False, reasons.over_fair_share(session, claimant)
    if session.host:
        over = reasons.over_host_fair_share(session, claimant)
        if over is not None:
            return False, over
    suffix = ""
    for bound in loss_bounds_for(session, claimant):
        memo = (home, shape_key(session, claimant), bound)
        if memo in candidates.reclaim_failed:
            suffix = candidates.reclaim_failed[memo]
            continue
        search = VictimSearch(session, claimant, bound)
        started, suffix = _reclaim_within(session, claimant, candidates, search, memo)
        if started:
            return True, ""
        if not search.over_bound:
            break  # the bound passed nobody over: without it the search would be the same
    return False, suffix


def _reclaim_within(
    session: Session, claimant: Workload, candidates: Candidates, search: VictimSearch, memo: tuple
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
        mine: all(used[level] + size <= fair.get(level, 0.0) + EPS for level in levels)
        for mine, levels in branch.items()
    }
    deserved_with_it = {
        mine: all(used[level] + size <= session.deserved[level] + EPS for level in levels)
        for mine, levels in branch.items()
    }
    if session.host:
        host = HostReclaim(session, claimant, search)
        for mine, levels in branch.items():
            fair_with_it[mine] = fair_with_it[mine] and host.within(levels, fair=True)
            deserved_with_it[mine] = deserved_with_it[mine] and host.within(levels, fair=False)

    def eligible(name: str) -> bool:
        mine, theirs = sides[name]
        if not fair_with_it[mine]:
            return False
        if session.host:
            return host.eligible(name, theirs, after, deserved_with_it[mine])
        if after(name) > fair.get(name, 0.0) + EPS and after(theirs) > fair.get(theirs, 0.0) + EPS:
            return True
        return (
            deserved_with_it[mine]
            and after(name) > session.deserved[name] + EPS
            and after(theirs) > session.deserved[theirs] + EPS
        )

    def ratio(name: str) -> float:
        share = fair.get(name, 0.0)
        if session.host:
            return host.dominant(name, after(name))
        return after(name) / share if share > EPS else float("inf")

    mine_ratio = (used[home] + size) / max(fair.get(home, 0.0), EPS)

    def stays_ahead(name: str, victim: Workload) -> bool:
        """Beyond its deserved quota, a claimant may only take from a queue that keeps at
        least its own share ratio afterwards. Otherwise the victim's queue, now the poorer
        one, takes the capacity back when the grace period ends, and the two trade it
        forever (sum of allocated²/fair falls with every allowed reclaim, so cycles end)."""
        left = after(name) - session._placed_size[victim.name]
        share = fair.get(name, 0.0)
        if session.host:  # in every resource the claimant asks for (rule 3b)
            gpus_ok = not size or share <= EPS or left / share + EPS >= mine_ratio
            return gpus_ok and host.stays_ahead(name, victim)
        return share <= EPS or left / share + EPS >= mine_ratio

    walks: dict[str, Iterator[Workload]] = {}
    floors = candidates.floors  # a necessary condition first: most queues are below it
    if session.host:
        # over its share in CPUs or memory alone is enough, which the GPU floors cannot see
        heap = [(-ratio(name), session.queue_order[name], name) for name in sides if eligible(name)]
    elif session.policy.reclaim_groups:
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
                ratio = allocated / share if share > EPS else float("inf")
                entries.append((-ratio, order[name], name))
    return entries


class HostReclaim:
    """Reclaim's conditions in the counted CPUs and memory (rule 3b, after KAI): the
    claimant's side must stay within its fair share (or deserved quota) in every resource,
    a victim's queue must be over its fair share (or deserved quota) in any one, and
    beyond deserved the share-ratio condition holds in every resource the claimant asks
    for. Built only when ``Session.host`` is not empty."""

    def __init__(self, session: Session, claimant: Workload, search: VictimSearch) -> None:
        self.session = session
        self.claimant = claimant
        self.search = search
        self.asks = [(r, r.amount(claimant.request)) for r in session.host]

    def within(self, levels: list[str], *, fair: bool) -> bool:
        for resource, amount in self.asks:
            bound = resource.fair if fair else resource.deserved
            for level in levels:
                if resource.allocated[level] + amount > bound.get(level, 0.0) + EPS:
                    return False
        return True

    def _after(self, resource, name: str) -> int:
        return resource.allocated[name] - self.search.freed_host[resource.key].get(name, 0)

    def _over(self, name: str, gpus_after: float, *, fair: bool) -> bool:
        session = self.session
        gpu_bound = session.fair.get(name, 0.0) if fair else session.deserved[name]
        if gpus_after > gpu_bound + EPS:
            return True
        for resource in session.host:
            bound = resource.fair.get(name, 0.0) if fair else resource.deserved[name]
            if self._after(resource, name) > bound + EPS:
                return True
        return False

    def eligible(self, name: str, theirs: str, after, deserved_with_it: bool) -> bool:
        if self._over(name, after(name), fair=True) and self._over(
            theirs, after(theirs), fair=True
        ):
            return True
        return (
            deserved_with_it
            and self._over(name, after(name), fair=False)
            and self._over(theirs, after(theirs), fair=False)
        )

    def dominant(self, name: str, gpus_after: float) -> float:
        """The queue's largest allocated / fair share over GPUs and the counted resources."""
        best = share_ratio(gpus_after, self.session.fair.get(name, 0.0))
        for resource in self.session.host:
            best = max(best, resource.ratio(name, self.search.freed_host[resource.key]))
        return best

    def stays_ahead(self, name: str, victim: Workload) -> bool:
        home = self.claimant.queue
        for resource, amount in self.asks:
            if not amount:
                continue
            share = resource.fair.get(name, 0.0)
            if share <= EPS:
                continue
            mine = (resource.allocated[home] + amount) / max(resource.fair.get(home, 0.0), EPS)
            left = self._after(resource, name) - resource.amount(victim.request)
            if left / share + EPS < mine:
                return False
        return True
