"""Fair share: how many GPUs each queue *should* have right now (docs/scheduling.md, rule 2).

Computed top-down through the department tree. At each level the parent's share
is the capacity its children divide:

1. each child gets its deserved quota, capped by its demand (running + pending)
   and its limit; when those add up to more than the capacity they are granted in
   full anyway and nothing is left over;
2. what is left goes to children that still want more, higher ``priority`` first;
   inside one priority level it is water-filled in proportion to
   ``over_quota_weight`` (capped by limit and demand, and a queue that reaches its
   cap keeps exactly that), then each uncapped over-quota part is rounded down to
   whole GPUs and the GPUs left over go one at a time to the largest remainders
   (declared first wins a tie) before anything flows to the next level.

Weight-0 queues get nothing beyond their quota. Amounts are in milli-GPUs.

With a ``Usage`` (usage-decayed fair share, ``scheduler.engine.usage``) each round of the
water-fill divides by the queues' share weights instead of their over-quota weights; that is
the one place usage enters (``_round_weights``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from scheduler.common.limits import MILLI
from scheduler.engine.model import Queue
from scheduler.engine.usage import Usage, share_weights

_EPS = 1e-6


def fair_shares(
    queues: Sequence[Queue],
    deserved: Mapping[str, float],
    leaf_demand: Mapping[str, float],
    capacity: float,
    usage: Usage | None = None,
) -> dict[str, float]:
    """Fair share of every queue (departments included), in milli-GPUs.

    ``deserved`` is each queue's resolved quota in milli-GPUs (see ``deserved_quotas``);
    ``usage``, when given, moves the over-quota part (docs/scheduling.md).
    """
    children: dict[str | None, list[Queue]] = {}
    for queue in queues:
        children.setdefault(queue.parent, []).append(queue)
    demand = subtree_totals(queues, leaf_demand)
    shares: dict[str, float] = {}

    def divide(parent: str | None, amount: float) -> None:
        kids = children.get(parent, [])
        if not kids:
            return
        divided = _divide_level(kids, deserved, demand, amount, usage)
        for kid, share in zip(kids, divided, strict=True):
            shares[kid.name] = share
            divide(kid.name, share)

    divide(None, float(capacity))
    return shares


def subtree_totals(queues: Sequence[Queue], leaf_amounts: Mapping[str, float]) -> dict[str, float]:
    """Sum a per-queue amount up the tree, so a department holds its whole subtree's amount."""
    totals = {queue.name: float(leaf_amounts.get(queue.name, 0)) for queue in queues}
    parents = {queue.name: queue.parent for queue in queues}
    for queue in queues:
        amount = leaf_amounts.get(queue.name, 0)
        parent = parents[queue.name]
        while amount and parent is not None:
            totals[parent] += amount
            parent = parents[parent]
    return totals


def deserved_quotas(queues: Sequence[Queue]) -> dict[str, float]:
    """Each queue's quota in milli-GPUs; a department without one deserves its children's sum."""
    children: dict[str, list[Queue]] = {}
    for queue in queues:
        if queue.parent is not None:
            children.setdefault(queue.parent, []).append(queue)
    resolved: dict[str, float] = {}

    def resolve(queue: Queue) -> float:
        if queue.name not in resolved:
            if queue.deserved_gpus is not None:
                resolved[queue.name] = _milli(queue.deserved_gpus)
            else:
                resolved[queue.name] = sum(resolve(kid) for kid in children.get(queue.name, []))
        return resolved[queue.name]

    for queue in queues:
        resolve(queue)
    return resolved


def _divide_level(
    kids: Sequence[Queue],
    deserved: Mapping[str, float],
    demand: Mapping[str, float],
    amount: float,
    usage: Usage | None = None,
) -> list[float]:
    caps = [
        min(demand[kid.name], _milli(kid.limit_gpus))
        if kid.limit_gpus is not None
        else demand[kid.name]
        for kid in kids
    ]
    share = [min(deserved[kid.name], cap) for kid, cap in zip(kids, caps, strict=True)]
    left = max(0.0, amount - sum(share))
    for priority in sorted({kid.priority for kid in kids}, reverse=True):
        if left <= _EPS:
            break
        level = [i for i, kid in enumerate(kids) if kid.priority == priority]
        left = _fill_level(level, kids, caps, share, left, usage)
    return share


def _fill_level(
    level: list[int],
    kids: Sequence[Queue],
    caps: list[float],
    share: list[float],
    left: float,
    usage: Usage | None = None,
) -> float:
    """Water-fill ``left`` into one priority level; returns what flows to the next level."""
    extra = dict.fromkeys(level, 0.0)
    capped: set[int] = set()
    active = [i for i in level if kids[i].over_quota_weight > 0 and share[i] < caps[i] - _EPS]
    pool = left
    while active and pool > _EPS:
        weights = _round_weights(kids, active, usage)
        weight = sum(weights)
        offer = {i: pool * w / weight for i, w in zip(active, weights, strict=True)}
        hitting = [i for i in active if share[i] + extra[i] + offer[i] >= caps[i] - _EPS]
        if not hitting:
            for i in active:
                extra[i] += offer[i]
            pool = 0.0
            break
        for i in hitting:
            pool -= caps[i] - share[i] - extra[i]
            extra[i] = caps[i] - share[i]
            capped.add(i)
        active = [i for i in active if i not in capped]

    # Round uncapped over-quota parts down to whole GPUs; hand out the rest by remainder.
    spare = pool
    remainders: list[tuple[float, int]] = []
    for i in level:
        if i in capped or extra[i] <= _EPS:
            continue
        whole = math.floor((extra[i] + _EPS) / MILLI) * MILLI
        remainders.append((extra[i] - whole, i))
        spare += extra[i] - whole
        extra[i] = whole
    for _remainder, i in sorted(remainders, key=lambda item: (-item[0], item[1])):
        if spare <= _EPS:
            break
        give = min(float(MILLI), spare, caps[i] - share[i] - extra[i])
        extra[i] += give
        spare -= give
    for i in level:
        share[i] += extra[i]
    return max(0.0, spare)


def _round_weights(kids: Sequence[Queue], active: list[int], usage: Usage | None) -> list[float]:
    """What one round of the water-fill divides by: the over-quota weights, or with usage the
    share weights (``scheduler.engine.usage.share_weights``)."""
    weights = [kids[i].over_quota_weight for i in active]
    if usage is None:
        return weights
    return share_weights(weights, [usage.of(kids[i].name) for i in active], usage.k)


def _milli(gpus: float) -> float:
    return gpus * MILLI
