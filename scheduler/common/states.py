"""The words for a workload's states, as the API, the store, the panel and the CLI spell them.

The engine's lifecycle (``scheduler/engine/lifecycle.py``) decides which transitions lead
where; this is only the vocabulary and its groups, so that the REST client, the CLI and the
spawner can read and print states without importing the engine.
"""

from __future__ import annotations

from enum import Enum


class Words(str, Enum):
    """A str-Enum that prints as its value everywhere (``enum.StrEnum`` once 3.10 is gone)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class WorkloadState(Words):
    """Every state a workload is in, as the API, the store, the panel and the CLI spell it."""

    PENDING = "pending"
    RUNNING = "running"
    PREEMPTING = "preempting"
    """Evicted for another workload; holds its GPUs until its process has stopped."""
    CANCELLING = "cancelling"
    """Stopping at its owner's request; holds its GPUs until its process has stopped."""
    STOPPING = "stopping"
    """Ran past its max runtime, or broke a rule the service enforces (more GPU memory than its
    share); holds its GPUs until its process has stopped, then failed."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    RELEASED = "released"
    """A notebook allocation given back."""
    REVOKED = "revoked"
    """A notebook allocation preempted."""

    @property
    def final(self) -> bool:
        return self in FINAL_STATES

    @property
    def active(self) -> bool:
        """Not final: the scheduler still acts on it."""
        return self in ACTIVE_STATES

    @property
    def releasing(self) -> bool:
        """Asked to stop and still holding its GPUs until its process has."""
        return self in RELEASING_STATES

    @property
    def holding(self) -> bool:
        """Holds GPUs: running or releasing."""
        return self in HOLDING_STATES


ACTIVE_STATES = (
    WorkloadState.PENDING,
    WorkloadState.RUNNING,
    WorkloadState.PREEMPTING,
    WorkloadState.CANCELLING,
    WorkloadState.STOPPING,
)
FINAL_STATES = (
    WorkloadState.SUCCEEDED,
    WorkloadState.FAILED,
    WorkloadState.CANCELLED,
    WorkloadState.RELEASED,
    WorkloadState.REVOKED,
)
RELEASING_STATES = (WorkloadState.PREEMPTING, WorkloadState.CANCELLING, WorkloadState.STOPPING)
HOLDING_STATES = (WorkloadState.RUNNING, *RELEASING_STATES)
