"""Job dependencies (Slurm's ``--dependency=afterany:ID`` / ``afterok:ID``): ``after`` and
``after_ok`` on a submission.

A job submitted with ``after: 12`` waits until job 12 has ended, whatever its outcome;
``after_ok: 12`` waits until it has succeeded, and is cancelled, with an event saying why,
as soon as job 12 ends any other way (failed, cancelled): it could never start.

Like a sweep's parallel limit, this is kept by the service, not the engine: before each cycle
``DependencyHolds.holds`` picks the pending jobs whose dependency has not ended, and the loop
leaves them out of the engine's snapshot with a reason in words ("waits for job 12
(running)"). The engine stays pure and unaware of dependencies. The link is stored on the
job's row (``after_id``, ``after_ok``), so a service restart keeps it.

A job may only depend on a job that exists when it is submitted (and that its submitter may
see: their own, or anyone's for an admin), so a cycle of dependencies cannot be written: each
points at a lower id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduler.common.limits import MAX_ID, shown
from scheduler.common.states import WorkloadState
from scheduler.fields import InvalidSpec
from scheduler.service.persistence.orm import WorkloadRecord

FIELDS = ("after", "after_ok")
WAITED = "waited"
"""The event of a job whose dependency ended and that may start now ("done waiting: job 12
ended (succeeded)")."""


@dataclass(frozen=True)
class Dependency:
    """Start after job ``id`` ends (``ok`` False), or only once it succeeded (``ok`` True)."""

    id: int
    ok: bool = False

    @property
    def field(self) -> str:
        """The API field that asked for it, for error messages."""
        return "after_ok" if self.ok else "after"


def parse_dependency(body: Mapping[str, Any]) -> Dependency | None:
    """``after: 12`` or ``after_ok: 12`` (a job id), not both; None if neither is given."""
    given = [key for key in FIELDS if body.get(key) is not None]
    if not given:
        return None
    if len(given) > 1:
        raise InvalidSpec("after_ok", "give after or after_ok, not both")
    key = given[0]
    value = body[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ID:
        raise InvalidSpec(key, f"must be a job id (a whole number >= 1), got {shown(value)}")
    return Dependency(value, ok=key == "after_ok")


def check_dependency(
    dependency: Dependency, target: WorkloadRecord | None, user: str, is_admin: bool
) -> None:
    """Refuse (400, naming the field) a dependency on a job that does not exist, that the
    submitter may not see, that is a notebook's allocation, or (``after_ok``) that has
    already ended without succeeding, so that the new job could never start."""
    field = dependency.field
    if target is None or not (is_admin or target.user == user):
        raise InvalidSpec(field, f"no job {dependency.id} of yours")
    if target.is_allocation:
        raise InvalidSpec(field, f"workload {dependency.id} is a notebook's GPUs, not a job")
    state = WorkloadState(target.state)
    if dependency.ok and state.final and state is not WorkloadState.SUCCEEDED:
        raise InvalidSpec(
            field, f"job {dependency.id} already {state.value}: this job could never start"
        )


class DependencyHolds:
    """Which pending jobs wait for another, and which can no longer start.

    ``state_of`` tells a job's state from its id (the loop's row while it is active, the
    store's after); the final states it reads are kept, so a job waiting on a long-finished
    one costs no query per cycle."""

    def __init__(self, state_of: Callable[[int], str | None]) -> None:
        self.state_of = state_of
        self._ended: dict[int, str] = {}
        self._held: set[int] = set()

    def holds(
        self, records: Iterable[WorkloadRecord]
    ) -> tuple[dict[int, str], list[tuple[WorkloadRecord, str]], list[tuple[WorkloadRecord, str]]]:
        """For the pending jobs among ``records`` with a dependency: the ones still waiting,
        with why in words; the ones to cancel, with why (their ``after_ok`` job ended without
        succeeding); and the ones held last time that may start now, with what they waited
        for in words ("job 12 ended (failed)"), for their timeline."""
        held: dict[int, str] = {}
        doomed: list[tuple[WorkloadRecord, str]] = []
        freed: list[tuple[WorkloadRecord, str]] = []
        wanted: set[int] = set()
        for record in records:
            after = record.after_id
            if after is None or record.state != WorkloadState.PENDING:
                continue
            wanted.add(after)
            state = self._state(after)
            if state is None:  # deleted by retention: nothing to wait for
                continue
            if not WorkloadState(state).final:
                goal = " to succeed" if record.after_ok else ""
                held[record.id] = f"waits for job {after} ({state}){goal}"
            elif record.after_ok and state != WorkloadState.SUCCEEDED:
                why = f"job {after}, which it had to follow (--after-ok), {state}"
                doomed.append((record, why))
            elif record.id in self._held:
                freed.append((record, f"job {after} ended ({state})"))
        for finished in list(self._ended):
            if finished not in wanted:
                del self._ended[finished]
        self._held = set(held)
        return held, doomed, freed

    def _state(self, workload_id: int) -> str | None:
        if workload_id in self._ended:
            return self._ended[workload_id]
        state = self.state_of(workload_id)
        if state is not None and WorkloadState(state).final:
            self._ended[workload_id] = state
        return state
