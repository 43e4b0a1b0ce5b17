"""The active workloads' rows in memory, indexed for what a cycle or a request asks often.

The scheduling loop keeps one row (``WorkloadRecord``) per active workload, in step with its
life in the lifecycle. Walking all of them costs milliseconds at 15,000 pending (their rows'
attributes are SQLAlchemy's), every cycle and every fast-path start, so the few questions
asked that often (which hold GPUs, which belong to a sweep, which wait for another job, a server's
allocation) have an
index each, kept up to date as the rows change state.
"""

from __future__ import annotations

from scheduler.common.states import WorkloadState
from scheduler.engine import Pending
from scheduler.service.persistence.orm import WorkloadRecord


class Roster:
    """The active workloads' rows (``records``), why the pending ones wait (``pending``),
    and the indexes over the rows."""

    def __init__(self) -> None:
        self.records: dict[int, WorkloadRecord] = {}
        self.pending: dict[int, Pending] = {}
        """Why each pending workload waits, as the last cycle (or fast-path start) left it;
        updated in place, so holders of this dict see the latest."""
        self.holding: dict[int, WorkloadRecord] = {}
        self.sweeps: dict[int, WorkloadRecord] = {}
        self.dependents: dict[int, WorkloadRecord] = {}
        """Jobs that wait for another (``after_id``), held back until it ends."""
        self._allocations: dict[tuple[str, str | None], WorkloadRecord] = {}

    def add(self, record: WorkloadRecord) -> None:
        """``record`` (stored, with its id) becomes active."""
        self.records[record.id] = record
        self.index(record)

    def remove(self, record: WorkloadRecord) -> None:
        """``record`` is no longer active (it ended, or its submission failed)."""
        self.unindex(record)
        self.records.pop(record.id, None)
        self.pending.pop(record.id, None)

    def index(self, record: WorkloadRecord) -> None:
        """Keep ``record`` (active, in ``records``) in the indexes as its state has it."""
        if WorkloadState(record.state).holding:
            self.holding[record.id] = record
        else:
            self.holding.pop(record.id, None)
        if record.sweep_id is not None:
            self.sweeps[record.id] = record
        if record.after_id is not None:
            self.dependents[record.id] = record
        if record.is_allocation:
            self._allocations[record.user, record.server_name] = record

    def unindex(self, record: WorkloadRecord) -> None:
        """``record`` leaves the indexes."""
        self.holding.pop(record.id, None)
        self.sweeps.pop(record.id, None)
        self.dependents.pop(record.id, None)
        if self._allocations.get((record.user, record.server_name)) is record:
            del self._allocations[record.user, record.server_name]

    def reindex(self) -> None:
        """Rebuild the indexes from the rows (after a rollback put their states back)."""
        self.holding.clear()
        self.sweeps.clear()
        self.dependents.clear()
        self._allocations.clear()
        for record in self.records.values():
            self.index(record)

    def allocation(self, user: str, server_name: str | None) -> WorkloadRecord | None:
        """The active allocation of ``user``'s server ``server_name``, if there is one."""
        return self._allocations.get((user, server_name))

    def held_resources(self) -> dict[str, tuple[float, float]]:
        """Per project: the CPU cores and memory (GiB) its workloads holding GPUs asked for,
        over all their replicas (for the metrics)."""
        held: dict[str, tuple[float, float]] = {}
        for record in self.holding.values():
            replicas = record.replicas or 1
            cores, gib = held.get(record.project, (0.0, 0.0))
            held[record.project] = (
                cores + (record.cpu_milli or 0) * replicas / 1000,
                gib + (record.memory_mib or 0) * replicas / 1024,
            )
        return held

    def counts(self) -> dict[str, int]:
        """Active workloads by state: the ones holding GPUs, the rest pending."""
        counts = {WorkloadState.PENDING.value: len(self.records) - len(self.holding)}
        for record in self.holding.values():
            counts[record.state] = counts.get(record.state, 0) + 1
        return counts
