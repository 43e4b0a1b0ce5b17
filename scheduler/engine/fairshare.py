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
from collections.abc import Callable, Mapping, Sequence

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
    *,
    limits: Mapping[str, float | None] | None = None,
    weights: Mapping[str, float] | None = None,
    unit: int = MILLI,
) -> dict[str, float]:
    """Fair share of every queue (departments included), in milli-GPUs.

    ``deserved`` is each queue's resolved quota in milli-GPUs (see ``deserved_quotas``);
    ``usage``, when given, moves the over-quota part (docs/scheduling.md, usage-decayed fair
    share: GPUs only). For a host resource (``scheduler.engine.resources``) the same rule
    runs on its own amounts: ``limits`` and ``weights`` per queue replace ``limit_gpus`` and
    ``over_quota_weight``, and over-quota parts round to ``unit`` (a core, a GiB).
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
        divided = _divide_level(kids, deserved, demand, amount, limits, weights, unit, usage)
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


def _gpu_quota(queue: Queue) -> float | None:
    return None if queue.deserved_gpus is None else _milli(queue.deserved_gpus)


def deserved_quotas(
    queues: Sequence[Queue],
    own: Callable[[Queue], float | None] = _gpu_quota,
    missing: float = 0,
) -> dict[str, float]:
    """Each queue's quota in milli-GPUs; a department without one deserves its children's sum.

    ``own`` reads another resource's quota (``scheduler.engine.resources``), and ``missing``
    is what a leaf without one deserves there (unlimited for CPUs and memory)."""
    children: dict[str, list[Queue]] = {}
    for queue in queues:
        if queue.parent is not None:
            children.setdefault(queue.parent, []).append(queue)
    resolved: dict[str, float] = {}

    def resolve(queue: Queue) -> float:
        if queue.name not in resolved:
            value = own(queue)
            if value is not None:
                resolved[queue.name] = value
            elif queue.name in children:
                resolved[queue.name] = sum(resolve(kid) for kid in children[queue.name])
            else:
                resolved[queue.name] = missing
        return resolved[queue.name]

    for queue in queues:
        resolve(queue)
    return resolved


def _divide_level(
    kids: Sequence[Queue],
    deserved: Mapping[str, float],
    demand: Mapping[str, float],
    amount: float,
    limits: Mapping[str, float | None] | None = None,
    weights: Mapping[str, float] | None = None,
    unit: int = MILLI,
    usage: Usage | None = None,
) -> list[float]:
    if limits is None:
        caps = [
            min(demand[kid.name], _milli(kid.limit_gpus))
            if kid.limit_gpus is not None
            else demand[kid.name]
            for kid in kids
        ]
    else:
        caps = [
            demand[kid.name]
            if (limit := limits.get(kid.name)) is None
            else min(demand[kid.name], float(limit))
            for kid in kids
        ]
    weight = (
        [kid.over_quota_weight for kid in kids]
        if weights is None
        else [weights[kid.name] for kid in kids]
    )
    usages = None if usage is None else [usage.of(kid.name) for kid in kids]
    k = 0.0 if usage is None else usage.k
    share = [min(deserved[kid.name], cap) for kid, cap in zip(kids, caps, strict=True)]
    left = max(0.0, amount - sum(share))
    for priority in sorted({kid.priority for kid in kids}, reverse=True):
        if left <= _EPS:
            break
        level = [i for i, kid in enumerate(kids) if kid.priority == priority]
        left = _fill_level(level, weight, caps, share, left, unit, usages, k)
    return share


def _fill_level(
    level: list[int],
    weights: list[float],
    caps: list[float],
    share: list[float],
    left: float,
    unit: int = MILLI,
    usages: list[float] | None = None,
    k: float = 0.0,
) -> float:
    """Water-fill ``left`` into one priority level; returns what flows to the next level."""
    extra = dict.fromkeys(level, 0.0)
    capped: set[int] = set()
    active = [i for i in level if weights[i] > 0 and share[i] < caps[i] - _EPS]
    pool = left
    while active and pool > _EPS:
        round_weights = _round_weights(weights, active, usages, k)
        weight = sum(round_weights)
        offer = {i: pool * w / weight for i, w in zip(active, round_weights, strict=True)}
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

    # Round uncapped over-quota parts down to whole GPUs (cores, GiB); hand out the rest by
    # remainder.
    spare = pool
    remainders: list[tuple[float, int]] = []
    for i in level:
        if i in capped or extra[i] <= _EPS:
            continue
        whole = math.floor((extra[i] + _EPS) / unit) * unit
        remainders.append((extra[i] - whole, i))
        spare += extra[i] - whole
        extra[i] = whole
    for _remainder, i in sorted(remainders, key=lambda item: (-item[0], item[1])):
        if spare <= _EPS:
            break
        give = min(float(unit), spare, caps[i] - share[i] - extra[i])
        extra[i] += give
        spare -= give
    for i in level:
        share[i] += extra[i]
    return max(0.0, spare)


def _round_weights(
    weights: list[float], active: list[int], usages: list[float] | None, k: float
) -> list[float]:
    """What one round of the water-fill divides by: the over-quota weights, or with usage the
    share weights (``scheduler.engine.usage.share_weights``)."""
    plain = [weights[i] for i in active]
    if usages is None:
        return plain
    return share_weights(plain, [usages[i] for i in active], k)


def _milli(gpus: float) -> float:
    return gpus * MILLI
