"""CPUs and memory counted per queue, once some queue has a quota for them (rule 3b).

GPUs are the engine's own unit (``Session.use``, ``Session.fair``, ``Session.deserved``). A
host resource, CPU in milli-cores or memory in MiB, is counted beside them only when a
queue of the snapshot sets a deserved quota or a limit for it (``Queue.has_host_quota``):
otherwise ``Session.host`` is empty and every action takes its GPU-only path, with the
decisions and speed it had before CPU quotas existed. Following KAI's proportion plugin, a
queue without a deserved quota for a counted resource is unlimited in it (granted its
demand first, never over its fair share there), a department without one deserves its
children's sum, and a queue is over its fair share when it is over in any resource.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduler.common.limits import MILLI
from scheduler.engine.fairshare import deserved_quotas, fair_shares, subtree_totals
from scheduler.engine.model import Node, Queue, Request, Workload

CPU = "cpu"
MEMORY = "memory"
UNLIMITED = float("inf")
EPS = 1e-6


@dataclass
class HostResource:
    """One counted host resource for one session: its quotas (static) and its use."""

    key: str
    """``CPU`` or ``MEMORY``."""
    deserved: dict[str, float]
    """Per queue, milli-cores or MiB; ``UNLIMITED`` when not set (KAI's default)."""
    limits: dict[str, float | None]
    weights: dict[str, float]
    capacity: float
    """What the nodes have together; ``UNLIMITED`` when a node does not say."""
    allocated: dict[str, int]
    """Per queue, departments including their subtree (as ``Accounting``)."""
    non_preemptible: dict[str, int]
    demand: dict[str, float]
    """Per leaf queue: running + pending (+ releasing), for the fair share."""
    fair: dict[str, float]

    def amount(self, request: Request) -> int:
        """What a workload of this request uses of the resource, over all its replicas."""
        per_replica = request.cpu_milli if self.key == CPU else request.memory_mib
        return per_replica * request.replicas

    def compute_fair(self, queues: Sequence[Queue]) -> None:
        """Rule 2 on this resource: its capacity, its demand, its limits and weights."""
        self.fair = fair_shares(
            queues,
            self.deserved,
            self.demand,
            self.capacity,
            limits=self.limits,
            weights=self.weights,
            unit=MILLI if self.key == CPU else 1024,
        )

    def fork(self) -> HostResource:
        """A copy whose counts change apart from this one's (quotas are shared)."""
        return HostResource(
            self.key,
            self.deserved,
            self.limits,
            self.weights,
            self.capacity,
            dict(self.allocated),
            dict(self.non_preemptible),
            dict(self.demand),
            self.fair,
        )

    def over_fair(self, name: str, freed: Mapping[str, int] | None = None) -> bool:
        used = self.allocated[name] - (freed.get(name, 0) if freed else 0)
        return used > self.fair.get(name, 0.0) + EPS

    def ratio(self, name: str, freed: Mapping[str, int] | None = None) -> float:
        """Allocated / fair share (0 when it uses none, infinite when its share is 0)."""
        used = self.allocated[name] - (freed.get(name, 0) if freed else 0)
        return share_ratio(used, self.fair.get(name, 0.0))

    def status_deserved(self, name: str) -> float | None:
        value = self.deserved[name]
        return None if value == UNLIMITED else value


def share_ratio(used: float, share: float) -> float:
    """Allocated / fair share (0 when it uses none, infinite when its share is 0)."""
    if share > EPS:
        return used / share
    return 0.0 if used <= 0 else UNLIMITED


def _quota(queue: Queue, key: str) -> tuple[int | None, int | None, float | None]:
    if key == CPU:
        return queue.deserved_cpu_milli, queue.limit_cpu_milli, queue.over_quota_weight_cpu
    return queue.deserved_memory_mib, queue.limit_memory_mib, queue.over_quota_weight_memory


def counted(queues: Sequence[Queue]) -> tuple[str, ...]:
    """The host resources some queue has a deserved quota or a limit for."""
    keys = []
    for key in (CPU, MEMORY):
        if any(
            _quota(queue, key)[0] is not None or _quota(queue, key)[1] is not None
            for queue in queues
        ):
            keys.append(key)
    return tuple(keys)


def host_resources(queues: Sequence[Queue], nodes: Sequence[Node]) -> list[HostResource]:
    """The counted resources of a snapshot, with their quotas and nothing used yet
    (empty unless some queue sets a CPU or memory quota: the GPU-only path)."""
    if not any(queue.has_host_quota for queue in queues):
        return []
    found = []
    for key in counted(queues):
        limits: dict[str, float | None] = {}
        weights: dict[str, float] = {}
        for queue in queues:
            _own, limit, weight = _quota(queue, key)
            limits[queue.name] = limit
            weights[queue.name] = queue.over_quota_weight if weight is None else weight
        sizes = [node.cpu_milli if key == CPU else node.memory_mib for node in nodes]
        capacity = UNLIMITED if any(size is None for size in sizes) else float(sum(sizes))
        zero = dict.fromkeys((queue.name for queue in queues), 0)
        found.append(
            HostResource(
                key,
                _deserved(queues, key),
                limits,
                weights,
                capacity,
                dict(zero),
                dict(zero),
                dict.fromkeys(zero, 0.0),
                {},
            )
        )
    return found


def _deserved(queues: Sequence[Queue], key: str) -> dict[str, float]:
    """Each queue's deserved amount; a leaf without one is unlimited, a department without
    one deserves its children's sum (unlimited if any child is)."""

    def own(queue: Queue) -> float | None:
        value = _quota(queue, key)[0]
        return None if value is None else float(value)

    return deserved_quotas(queues, own, UNLIMITED)


def count_workloads(
    resources: list[HostResource],
    queues: Sequence[Queue],
    running: Iterable[Workload],
    waiting: Iterable[Workload],
) -> None:
    """Fill use and demand from the running work and the work that waits or releases, then
    the fair shares."""
    for resource in resources:
        leaf_alloc = dict.fromkeys(resource.allocated, 0)
        leaf_np = dict.fromkeys(resource.allocated, 0)
        for workload in running:
            amount = resource.amount(workload.request)
            leaf_alloc[workload.queue] += amount
            resource.demand[workload.queue] += amount
            if not workload.preemptible:
                leaf_np[workload.queue] += amount
        for workload in waiting:
            resource.demand[workload.queue] += resource.amount(workload.request)
        resource.allocated = {k: int(v) for k, v in subtree_totals(queues, leaf_alloc).items()}
        resource.non_preemptible = {k: int(v) for k, v in subtree_totals(queues, leaf_np).items()}
        resource.compute_fair(queues)


def words(key: str, amount: float) -> str:
    """8000 milli-cores -> "8 CPUs", 1000 -> "1 CPU"; 65536 MiB -> "64 GiB of memory"."""
    if key == CPU:
        cores = round(amount / MILLI, 3)
        return f"{cores:g} CPU" if cores == 1 else f"{cores:g} CPUs"
    return f"{round(amount / 1024, 2):g} GiB of memory"


def bare(key: str, amount: float) -> str:
    """The number alone, in the resource's unit: "30" (CPUs), "200" (GiB)."""
    return f"{round(amount / MILLI, 3):g}" if key == CPU else f"{round(amount / 1024, 2):g}"


def label(key: str) -> str:
    """ "32-CPU limit", "256-GiB memory limit": the noun after a bare number."""
    return "CPU" if key == CPU else "GiB memory"
