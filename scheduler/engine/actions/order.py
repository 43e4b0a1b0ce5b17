"""Rule 7: the order in which the cycle serves pending work."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

from scheduler.engine.model import Workload
from scheduler.engine.session import QueueStanding, Session


class ServiceOrder:
    """Pending work in rule 7's order, kept current as the cycle changes allocations.

    Queues first whose allocation with their next workload stays inside the deserved quota, then
    higher queue priority, then the most starved queue (allocated / fair share), then workload
    priority (aged by its wait, with ``Policy.aging``) and submission time. A heap holds one
    entry per queue; a queue's entry is re-keyed when it starts something, and ``touch``
    re-keys the queues that evictions took from.
    """

    def __init__(self, session: Session, pending: list[Workload]) -> None:
        self.session = session
        self.by_queue: dict[str, list[Workload]] = {}
        self.workload_key = session.order_key()
        self.keys: dict[str, list[tuple]] = {}
        """Per queue: ``workload_key`` of each of ``by_queue``'s workloads (computed once)."""
        keys = [self.workload_key(workload) for workload in pending]
        for i in sorted(range(len(pending)), key=keys.__getitem__):  # stable, as by workload
            workload = pending[i]
            self.by_queue.setdefault(workload.queue, []).append(workload)
            self.keys.setdefault(workload.queue, []).append(keys[i])
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
        if session.host:
            standing = standing._replace(
                within_host=all(
                    r.allocated[name] + r.amount(head.request) <= r.deserved[name] + 1e-6
                    for r in session.host
                ),
                host_starved=max(r.ratio(name) for r in session.host),
            )
        return (
            *session.policy.queue_key(standing),
            *self.keys[name][self.heads[name]],
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
